package ui_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	_ "image/png"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/internal/enginetest"
	"github.com/delay-queue/delay-queue/internal/redistest"
	"github.com/delay-queue/delay-queue/routers"
	"github.com/delay-queue/delay-queue/ui"
	"github.com/delay-queue/delay-queue/wire"
)

// updateScreenshotEnv names the environment variable that makes the
// dashboard test write docs/dashboard.png (for the README).
const updateScreenshotEnv = "DQ_UPDATE_SCREENSHOT"

// dashboardServer is the server a browser test talks to: the engine on
// miniredis, and the API with the dashboard mounted, as in the binary.
type dashboardServer struct {
	t     *testing.T
	url   string
	token string
}

func startDashboardServer(t *testing.T, token string) *dashboardServer {
	t.Helper()
	return startDashboardServerWith(t, routers.Options{AuthToken: token})
}

// startDashboardServerWith is startDashboardServer with other options; its
// BlockTimeout and UI are set here.
func startDashboardServerWith(t *testing.T, opts routers.Options) *dashboardServer {
	t.Helper()
	logger := slog.New(redistest.LogHandler(t, slog.LevelWarn))
	mini := redistest.Mini(t)
	q := enginetest.Start(t, mini.Addr(), 5*time.Second, logger)

	// The dashboard is mounted by the API, as in the server binary.
	opts.BlockTimeout, opts.UI = 5*time.Second, ui.Handler()
	srv := httptest.NewServer(routers.New(q, opts, logger))
	t.Cleanup(srv.Close) // before the engine stops
	return &dashboardServer{t: t, url: srv.URL, token: opts.AuthToken}
}

// post calls the API and returns the envelope's data, failing the test on
// anything but code 0.
func (s *dashboardServer) post(path string, body any) json.RawMessage {
	s.t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		s.t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, s.url+path, bytes.NewReader(raw))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("POST %s: %v", path, err)
	}
	var envelope wire.Envelope[json.RawMessage]
	if err := json.Unmarshal(answer, &envelope); err != nil || resp.StatusCode != http.StatusOK || envelope.Code != 0 {
		s.t.Fatalf("POST %s %s: status %d, answer %s", path, raw, resp.StatusCode, answer)
	}
	return envelope.Data
}

// jobState returns a job's state through /get, "" for an unknown job.
func (s *dashboardServer) jobState(id string) string {
	s.t.Helper()
	data := s.post("/get", map[string]string{"id": id})
	if string(data) == "null" {
		return ""
	}
	var job wire.JobInfo
	if err := json.Unmarshal(data, &job); err != nil {
		s.t.Fatalf("/get %s: %s: %v", id, data, err)
	}
	return job.State
}

// popOne pops one job of topic (which must have one ready) and returns its id.
func (s *dashboardServer) popOne(topic string) string {
	s.t.Helper()
	var job wire.Delivery
	data := s.post("/pop", map[string]any{"topic": topic, "timeout": 5})
	if err := json.Unmarshal(data, &job); err != nil || job.ID == "" {
		s.t.Fatalf("pop %s: got %s", topic, data)
	}
	return job.ID
}

// makeDead pushes a job that may be delivered once, pops it and releases
// it, which sends it to the dead letters.
func (s *dashboardServer) makeDead(topic, id, body string) {
	s.t.Helper()
	s.post("/push", map[string]any{"topic": topic, "id": id, "delay": 0, "ttr": 60, "body": body, "max_attempts": 1})
	if got := s.popOne(topic); got != id {
		s.t.Fatalf("popped %s, want %s", got, id)
	}
	var released wire.ReleaseResult
	if err := json.Unmarshal(s.post("/release", map[string]any{"id": id}), &released); err != nil || released.State != "dead" {
		s.t.Fatalf("release %s: state %q, want dead", id, released.State)
	}
}

// topicRowsScript reads the topics table as a user sees it: topic →
// column header → the number shown under it, "" for the totals row.
const topicRowsScript = `
const headers = [...document.querySelectorAll('#topics-table thead th')].map((th) => th.textContent.trim());
const rows = {};
for (const tr of document.querySelectorAll('#topics-body tr, #topics-total')) {
  const counts = {};
  for (const cell of tr.children) {
    if (cell.tagName === 'TD') counts[headers[cell.cellIndex]] = Number(cell.textContent.replace(/[^0-9]/g, ''));
  }
  rows[tr.dataset.topic || ''] = counts;
}
return JSON.stringify(rows);`

// waitForCounts waits until the topics table shows want.
func waitForCounts(b *browser, want map[string]map[string]int) {
	b.t.Helper()
	wantJSON, err := json.Marshal(want)
	if err != nil {
		b.t.Fatal(err)
	}
	b.waitUntil("the topics table shows "+string(wantJSON), `
const want = JSON.parse(arguments[0]);
const got = JSON.parse((function () {`+topicRowsScript+`})());
if (Object.keys(got).length !== Object.keys(want).length) return false;
for (const [topic, cols] of Object.entries(want)) {
  if (!got[topic] || Object.keys(got[topic]).length !== Object.keys(cols).length) return false;
  for (const [col, n] of Object.entries(cols)) if (got[topic][col] !== n) return false;
}
return true;`, string(wantJSON))
}

// counts is a row of the topics table, by column header.
func counts(delayed, ready, reserved, dead int) map[string]int {
	return map[string]int{"Delayed": delayed, "Ready": ready, "Reserved": reserved, "Dead": dead,
		"Total": delayed + ready + reserved + dead}
}

// TestBrowserDashboard drives the page in a headless Chromium: the topics
// table and chart show what the test pushed, a job is looked up, and dead
// letters are kicked and deleted through the page's buttons.
func TestBrowserDashboard(t *testing.T) {
	b := startBrowser(t)
	s := startDashboardServer(t, "")

	// orders: four delayed (three due within the hour) and two ready.
	for i, delay := range []int{120, 600, 1800, 7200} {
		job := map[string]any{"topic": "orders", "id": fmt.Sprintf("order-%d", i+1), "delay": delay, "ttr": 90,
			"body": fmt.Sprintf(`{"order":%d}`, i+1)}
		if i == 0 {
			job["body"] = strings.Repeat("0123456789", 200) // 2000 characters: the preview cuts it
			job["retry"] = []int{60, 600}                   // and no max_attempts: 3 attempts at most
		}
		s.post("/push", job)
	}
	for i := range 2 {
		s.post("/push", map[string]any{"topic": "orders", "id": fmt.Sprintf("order-now-%d", i+1), "delay": 0, "ttr": 90, "body": "{}"})
	}
	// mail: two dead letters (one whose body is markup that must stay
	// text) and one reserved job, whose lease ends within the hour.
	const markup = `<img src=x onerror="window.injected=1"><b>hello</b>`
	s.makeDead("mail", "mail-dead-1", markup)
	s.makeDead("mail", "mail-dead-2", "second")
	s.post("/push", map[string]any{"topic": "mail", "id": "mail-busy", "delay": 0, "ttr": 600, "body": "busy"})
	if got := s.popOne("mail"); got != "mail-busy" {
		t.Fatalf("popped %s, want mail-busy", got)
	}

	// /ui redirects to /ui/, which loads the page.
	b.open(s.url + "/ui")
	var path string
	b.eval(&path, "return location.pathname")
	if path != "/ui/" {
		t.Fatalf("the page is at %s, want /ui/", path)
	}
	waitForCounts(b, map[string]map[string]int{
		"orders": counts(4, 2, 0, 0),
		"mail":   counts(0, 0, 1, 2),
		"":       counts(4, 2, 1, 2),
	})

	// The chart: 60 one-minute bars holding the three delayed orders due
	// within the hour and the reserved mail job's lease end.
	b.waitUntil("the chart shows 4 jobs in 60 bars", `
const svg = document.querySelector('#upcoming-chart svg');
return !!svg && svg.dataset.total === '4' && svg.querySelectorAll('rect[data-count]').length === 60;`)
	// Each job is in the bar of the minute it is due in (the reserved one
	// by the end of its lease), by the times the API reports.
	var dues []int64
	for _, id := range []string{"order-1", "order-2", "order-3", "mail-busy"} {
		var job wire.JobInfo
		if err := json.Unmarshal(s.post("/get", map[string]string{"id": id}), &job); err != nil {
			t.Fatal(err)
		}
		due := job.DelayMS
		if job.LeaseUntilMS != nil {
			due = max(due, *job.LeaseUntilMS)
		}
		dues = append(dues, due)
	}
	var bars [][2]int64 // start_ms, count
	b.eval(&bars, `return [...document.querySelectorAll('#upcoming-chart rect[data-count]')]
  .map((r) => [Number(r.dataset.startMs), Number(r.dataset.count)]);`)
	for i, bar := range bars {
		var want int64
		for _, due := range dues {
			if due >= bar[0] && due < bar[0]+time.Minute.Milliseconds() {
				want++
			}
		}
		if bar[1] != want {
			t.Errorf("bar %d (from %s) counts %d jobs, want %d (due at %v)", i, time.UnixMilli(bar[0]).Format(time.TimeOnly), bar[1], want, dues)
		}
	}
	if got := b.text("#upcoming-total"); got != "4 jobs" {
		t.Errorf("chart total %q, want \"4 jobs\"", got)
	}

	// Dead letters: mail is chosen by default, as the topic that has some.
	b.waitUntil("the dead letters of mail are listed", `
return document.getElementById('dead-topic').value === 'mail' &&
  document.querySelectorAll('#dead-body tr').length === 2 &&
  !!document.querySelector('#dead-body tr[data-id="mail-dead-1"] button.kick');`)
	var bodyCell string
	b.eval(&bodyCell, `return document.querySelector('#dead-body tr[data-id="mail-dead-1"] td.body').textContent`)
	if bodyCell != markup {
		t.Errorf("dead letter body cell reads %q, want the markup as text %q", bodyCell, markup)
	}

	// Job lookup: state, attempts, ttr, and the first 500 characters.
	b.typeInto("#lookup-id", "order-1")
	b.click("#lookup-form button[type=submit]")
	b.waitUntil("the lookup shows order-1", `
const id = document.querySelector('#lookup-result dd[data-field=id]');
return !!id && id.textContent === 'order-1' && !document.getElementById('lookup-result').hidden;`)
	lookup := map[string]string{}
	b.eval(&lookup, `const out = {};
for (const dd of document.querySelectorAll('#lookup-result dd')) out[dd.dataset.field] = dd.textContent;
out.preview = document.getElementById('lookup-body').textContent;
return out;`)
	wantLookup := map[string]string{"topic": "orders", "state": "delay", "attempts": "0 of at most 3", "ttr": "90 s",
		"body-size": "first 500 of 2,000 characters"}
	for field, want := range wantLookup {
		if lookup[field] != want {
			t.Errorf("lookup %s reads %q, want %q", field, lookup[field], want)
		}
	}
	if want := strings.Repeat("0123456789", 50) + "\n…"; lookup["preview"] != want {
		t.Errorf("body preview %q, want the first 500 characters and an ellipsis", lookup["preview"])
	}
	if !strings.Contains(lookup["due"], "in 2 min") {
		t.Errorf("due reads %q, want the local time and \"in 2 min\"", lookup["due"])
	}

	// A job without a schedule or max_attempts has no limit.
	b.typeInto("#lookup-id", "order-2")
	b.click("#lookup-form button[type=submit]")
	b.waitUntil("the lookup shows order-2 without a limit", `
const id = document.querySelector('#lookup-result dd[data-field=id]');
const attempts = document.querySelector('#lookup-result dd[data-field=attempts]');
return !!id && id.textContent === 'order-2' && attempts.textContent === '0 no limit';`)

	// A code-1 answer is shown under the panel that made the call.
	b.typeInto("#lookup-id", strings.Repeat("x", 300))
	b.click("#lookup-form button[type=submit]")
	b.waitUntil("the lookup shows the server's error", `
return document.getElementById('lookup-error').textContent.includes('id must be at most 256 bytes, got 300');`)

	// Delete, then cancel: nothing changes.
	b.click(`#dead-body tr[data-id="mail-dead-1"] button.delete`)
	b.waitUntil("the confirmation asks about mail-dead-1", `
const d = document.getElementById('confirm-dialog');
return d.open && document.getElementById('confirm-text').textContent.includes('mail-dead-1');`)
	b.click("#confirm-cancel")
	b.waitUntil("the confirmation closes", "return !document.getElementById('confirm-dialog').open")
	if got := s.jobState("mail-dead-1"); got != "dead" {
		t.Fatalf("after a cancelled delete mail-dead-1 is %q, want dead", got)
	}

	// Kick, confirmed: the job is ready again, as the API says. It is the
	// newer dead letter, so a kick of "the oldest" would take the other.
	b.click(`#dead-body tr[data-id="mail-dead-2"] button.kick`)
	b.waitUntil("the confirmation asks about mail-dead-2", `
const d = document.getElementById('confirm-dialog');
return d.open && document.getElementById('confirm-text').textContent.includes('mail-dead-2');`)
	b.click("#confirm-ok")
	b.waitUntil("the page reports the kick", `
return document.getElementById('dead-notice').textContent === 'Kicked mail-dead-2 of mail: it is ready again.' &&
  !document.querySelector('#dead-body tr[data-id="mail-dead-2"]');`)
	if got := s.jobState("mail-dead-2"); got != "ready" {
		t.Fatalf("after the kick mail-dead-2 is %q, want ready", got)
	}

	// Delete, confirmed: the job is gone.
	b.click(`#dead-body tr[data-id="mail-dead-1"] button.delete`)
	b.waitUntil("the confirmation asks about mail-dead-1", `
return document.getElementById('confirm-dialog').open &&
  document.getElementById('confirm-text').textContent.includes('mail-dead-1');`)
	b.click("#confirm-ok")
	b.waitUntil("the dead letters of mail are empty", `
return document.querySelectorAll('#dead-body tr').length === 0 &&
  document.getElementById('dead-empty').textContent === 'No dead letters in mail.';`)
	if got := s.jobState("mail-dead-1"); got != "" {
		t.Fatalf("after the delete mail-dead-1 is %q, want gone", got)
	}
	waitForCounts(b, map[string]map[string]int{
		"orders": counts(4, 2, 0, 0),
		"mail":   counts(0, 1, 1, 0),
		"":       counts(4, 3, 1, 0),
	})

	// The page follows changes made elsewhere on its own, updating the
	// rows it has rather than replacing them.
	b.eval(nil, "document.querySelector('#topics-body tr[data-topic=\"mail\"]').keptAcrossRefreshes = true")
	if got := s.popOne("mail"); got != "mail-dead-2" {
		t.Fatalf("popped %s, want the kicked mail-dead-2", got)
	}
	waitForCounts(b, map[string]map[string]int{
		"orders": counts(4, 2, 0, 0),
		"mail":   counts(0, 0, 2, 0),
		"":       counts(4, 2, 2, 0),
	})
	var kept bool
	b.eval(&kept, "return document.querySelector('#topics-body tr[data-topic=\"mail\"]').keptAcrossRefreshes === true")
	if !kept {
		t.Error("a refresh replaced the mail row instead of updating it")
	}

	var injected bool
	b.eval(&injected, "return window.injected === 1 || !!document.querySelector('#main b, #main img')")
	if injected {
		t.Error("a job body was parsed as HTML")
	}

	screenshot := showBusyQueue(t, b, s)
	if os.Getenv(updateScreenshotEnv) == "1" {
		path := filepath.Join("..", "docs", "dashboard.png")
		if err := os.WriteFile(path, screenshot, 0o644); err != nil {
			t.Fatalf("write the screenshot: %v", err)
		}
		t.Logf("wrote %s", path)
	}
}

// showBusyQueue fills the queue with a few hundred jobs over four topics,
// shows a topic's dead letters and a reserved job in the page, and returns
// a screenshot of it (the one in the README).
func showBusyQueue(t *testing.T, b *browser, s *dashboardServer) []byte {
	t.Helper()
	topics := []string{"orders", "billing", "reports", "webhooks"}
	var jobs []map[string]any
	for minute := range 60 {
		// A wave, with a peak every quarter hour (scheduled reports).
		n := 4 + int(4*math.Sin(float64(minute)/7)) + minute%3
		if minute%15 == 14 {
			n += 9
		}
		for i := range n {
			topic := topics[(minute+i)%3]
			if minute%15 == 14 && i >= n-9 {
				topic = "reports"
			}
			jobs = append(jobs, map[string]any{"topic": topic, "id": fmt.Sprintf("%s-%d-%d", topic, minute, i),
				"delay": minute*60 + 20 + i, "ttr": 120, "body": fmt.Sprintf(`{"minute":%d,"n":%d}`, minute, i)})
		}
	}
	for i := range 23 {
		jobs = append(jobs, map[string]any{"topic": "billing", "id": fmt.Sprintf("invoice-%d", 1040+i), "delay": 0, "ttr": 300,
			"body": fmt.Sprintf(`{"invoice": %d, "customer": "c-%d", "amount_cents": %d, "currency": "EUR", "action": "send_reminder"}`,
				1040+i, 700+i*7, 1999+i*250)})
	}
	s.post("/push", map[string]any{"jobs": jobs})
	var reserved string
	for range 4 {
		reserved = s.popOne("billing")
	}
	for i := range 6 {
		s.makeDead("webhooks", fmt.Sprintf("hook-%d", 310+i),
			fmt.Sprintf(`{"event": "order.paid", "order": %d, "target": "hooks.internal/shop"}`, 88120+i))
	}

	b.waitUntil("the page shows the webhooks' dead letters", `
return !!document.querySelector('#topics-body tr[data-topic="webhooks"] button.dead-count');`)
	b.click(`#topics-body tr[data-topic="webhooks"] button.dead-count`)
	b.waitUntil("the dead letters of webhooks are listed", `
return document.getElementById('dead-topic').value === 'webhooks' && document.querySelectorAll('#dead-body tr').length === 6;`)
	b.typeInto("#lookup-id", reserved)
	b.click("#lookup-form button[type=submit]")
	b.waitUntil("the lookup shows "+reserved, `
const state = document.querySelector('#lookup-result dd[data-field=state]');
return !!state && state.textContent === 'reserved' && !!document.querySelector('#lookup-result dd[data-field=lease]');`)
	b.eval(nil, "document.activeElement.blur(); window.scrollTo(0, 0);")
	b.waitUntil("the chart shows the new jobs", `
const svg = document.querySelector('#upcoming-chart svg');
return !!svg && Number(svg.dataset.total) > 300;`)

	png := b.screenshot()
	config, _, err := image.DecodeConfig(bytes.NewReader(png))
	if err != nil || config.Width != viewportWidth || config.Height != viewportHeight {
		t.Fatalf("screenshot: %dx%d (%v), want a %dx%d PNG", config.Width, config.Height, err, viewportWidth, viewportHeight)
	}
	return png
}

// TestBrowserTokenPrompt runs the page against a server with auth on: it
// asks for the token, refuses a wrong one, keeps the right one in
// sessionStorage only, and asks again once it is forgotten.
func TestBrowserTokenPrompt(t *testing.T) {
	const token = "s3cret-token"
	b := startBrowser(t)
	s := startDashboardServer(t, token)
	s.post("/push", map[string]any{"topic": "billing", "id": "invoice-1", "delay": 0, "ttr": 30, "body": "{}"})

	b.open(s.url + "/ui/")
	b.waitUntil("the page asks for the token", `
return !document.getElementById('auth-panel').hidden && document.activeElement === document.getElementById('auth-token');`)
	var rows int
	b.eval(&rows, "return document.querySelectorAll('#topics-body tr').length")
	if rows != 0 {
		t.Fatalf("the topics table has %d rows before the token", rows)
	}

	b.typeInto("#auth-token", "wrong-token")
	b.click("#auth-form button[type=submit]")
	b.waitUntil("the page says the token was refused, and forgets it", `
return !document.getElementById('auth-panel').hidden &&
  document.getElementById('auth-error').textContent === 'The server refused this token.' &&
  sessionStorage.getItem('dq_auth_token') === null;`)

	b.typeInto("#auth-token", token)
	b.click("#auth-form button[type=submit]")
	waitForCounts(b, map[string]map[string]int{"billing": counts(0, 1, 0, 0), "": counts(0, 1, 0, 0)})
	b.waitUntil("the chart loads with the token", "return !!document.querySelector('#upcoming-chart svg')")

	var storage struct {
		Session string `json:"session"`
		Local   int    `json:"local"`
		Cookie  string `json:"cookie"`
		Hidden  bool   `json:"hidden"`
	}
	b.eval(&storage, `return {session: sessionStorage.getItem('dq_auth_token'), local: localStorage.length,
  cookie: document.cookie, hidden: document.getElementById('auth-panel').hidden};`)
	if storage.Session != token || storage.Local != 0 || storage.Cookie != "" || !storage.Hidden {
		t.Fatalf("after the token: %+v, want it in sessionStorage only and the form hidden", storage)
	}

	// A reload in the same tab keeps it.
	b.open(s.url + "/ui/")
	waitForCounts(b, map[string]map[string]int{"billing": counts(0, 1, 0, 0), "": counts(0, 1, 0, 0)})
	b.eval(&storage, `return {session: sessionStorage.getItem('dq_auth_token'), local: localStorage.length,
  cookie: document.cookie, hidden: document.getElementById('auth-panel').hidden};`)
	if !storage.Hidden {
		t.Fatal("the page asked for the token again after a reload in the same tab")
	}

	b.click("#forget-token")
	b.waitUntil("the page asks for the token again", `
return !document.getElementById('auth-panel').hidden && sessionStorage.getItem('dq_auth_token') === null &&
  document.getElementById('auth-error').textContent === '';`)
}

// TestBrowserDeadLetterPagesAndBulkActions pages through a topic's dead
// letters and empties topics with "Kick all" and "Delete all".
func TestBrowserDeadLetterPagesAndBulkActions(t *testing.T) {
	b := startBrowser(t)
	s := startDashboardServer(t, "")
	for i := range 25 {
		s.makeDead("alpha", fmt.Sprintf("alpha-%02d", i), "{}")
	}
	for i := range 3 {
		s.makeDead("beta", fmt.Sprintf("beta-%d", i), "{}")
	}

	b.open(s.url + "/ui/")
	waitForCounts(b, map[string]map[string]int{
		"alpha": counts(0, 0, 0, 25), "beta": counts(0, 0, 0, 3), "": counts(0, 0, 0, 28),
	})
	// Newest first, 20 to a page.
	b.waitUntil("the first page of alpha", `
const ids = [...document.querySelectorAll('#dead-body tr')].map((tr) => tr.dataset.id);
return document.getElementById('dead-topic').value === 'alpha' && ids.length === 20 &&
  ids[0] === 'alpha-24' && ids[19] === 'alpha-05' &&
  document.getElementById('dead-range').textContent === '1–20 of 25' && document.getElementById('dead-prev').disabled;`)
	b.click("#dead-next")
	b.waitUntil("the second page of alpha", `
const ids = [...document.querySelectorAll('#dead-body tr')].map((tr) => tr.dataset.id);
return ids.join() === 'alpha-04,alpha-03,alpha-02,alpha-01,alpha-00' &&
  document.getElementById('dead-range').textContent === '21–25 of 25' && document.getElementById('dead-next').disabled;`)

	b.click("#dead-kick-all")
	b.waitUntil("the confirmation asks to kick all 25", `
return document.getElementById('confirm-dialog').open &&
  document.getElementById('confirm-text').textContent === 'Kick all 25 dead letters of alpha back to ready?';`)
	b.click("#confirm-ok")
	b.waitUntil("the page reports the kick", `
return document.getElementById('dead-notice').textContent === 'Kicked 25 dead letters of alpha.' &&
  document.querySelectorAll('#dead-body tr').length === 0 && document.getElementById('dead-range').textContent === '';`)
	waitForCounts(b, map[string]map[string]int{
		"alpha": counts(0, 25, 0, 0), "beta": counts(0, 0, 0, 3), "": counts(0, 25, 0, 3),
	})
	for _, id := range []string{"alpha-00", "alpha-24"} {
		if got := s.jobState(id); got != "ready" {
			t.Errorf("after kick all %s is %q, want ready", id, got)
		}
	}

	// The user picks beta in the list.
	b.eval(nil, `const select = document.getElementById('dead-topic');
select.value = 'beta'; select.dispatchEvent(new Event('change'));`)
	b.waitUntil("the dead letters of beta", "return document.querySelectorAll('#dead-body tr').length === 3")
	b.click("#dead-delete-all")
	b.waitUntil("the confirmation asks to delete all 3", `
return document.getElementById('confirm-dialog').open &&
  document.getElementById('confirm-text').textContent === 'Delete all 3 dead letters of beta? This cannot be undone.';`)
	b.click("#confirm-ok")
	b.waitUntil("the page reports the deletion", `
return document.getElementById('dead-notice').textContent === 'Deleted 3 dead letters of beta.' &&
  document.querySelectorAll('#dead-body tr').length === 0;`)
	waitForCounts(b, map[string]map[string]int{"alpha": counts(0, 25, 0, 0), "": counts(0, 25, 0, 0)})
	if got := s.jobState("beta-0"); got != "" {
		t.Errorf("after delete all beta-0 is %q, want gone", got)
	}
}

// pushFromPageScript is what a rebinding page would run: a text/plain POST
// /push, which needs no preflight, on the page's own origin. It returns the
// status and the answer's body.
const pushFromPageScript = `
return fetch(new URL('../push', location.href), {method: 'POST', headers: {'Content-Type': 'text/plain'}, body: arguments[0]})
  .then(async (resp) => ({status: resp.status, body: await resp.text()}));`

// TestBrowserDNSRebinding opens the dashboard of a server without a token
// under two names that the browser maps to 127.0.0.1 itself
// (--host-resolver-rules; no DNS is asked): the page of a rebinding attack,
// under a name the server does not know, and the page under a name in
// allowed_hosts. Under the first, the page loads (it is static) but every
// API call is refused, the page says to set allowed_hosts, and a push made
// from the page does not happen; under the second, the dashboard works.
func TestBrowserDNSRebinding(t *testing.T) {
	const (
		foreignName = "rebind.example"
		allowedName = "dq.example"
	)
	b := startBrowser(t, "--no-proxy-server",
		"--host-resolver-rules=MAP "+foreignName+" 127.0.0.1, MAP "+allowedName+" 127.0.0.1")
	s := startDashboardServerWith(t, routers.Options{AllowedHosts: []string{allowedName}})
	s.post("/push", map[string]any{"topic": "billing", "id": "invoice-1", "delay": 0, "ttr": 30, "body": "{}"})
	served, err := url.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}
	port := served.Port()
	type pageAnswer struct {
		Status int    `json:"status"`
		Body   string `json:"body"`
	}

	b.open("http://" + foreignName + ":" + port + "/ui/")
	b.waitUntil("the page reports that its API calls are refused and names allowed_hosts", `
const status = document.getElementById('status');
return status.classList.contains('error') && status.textContent.includes('allowed_hosts');`)
	var rows int
	b.eval(&rows, "return document.querySelectorAll('#topics-body tr').length")
	if rows != 0 {
		t.Errorf("the topics table shows %d rows under %s, want none", rows, foreignName)
	}
	var answer pageAnswer
	b.eval(&answer, pushFromPageScript, `{"topic":"billing","id":"planted","delay":0,"ttr":30,"body":"x"}`)
	if answer.Status != http.StatusForbidden || !strings.Contains(answer.Body, "allowed_hosts") {
		t.Errorf("a push from the page under %s: %d %s, want 403 naming allowed_hosts", foreignName, answer.Status, answer.Body)
	}
	if got := s.jobState("planted"); got != "" {
		t.Errorf("the push from the page under %s made a job in state %q", foreignName, got)
	}

	b.open("http://" + allowedName + ":" + port + "/ui/")
	waitForCounts(b, map[string]map[string]int{"billing": counts(0, 1, 0, 0), "": counts(0, 1, 0, 0)})
	b.waitUntil("the chart loads", "return !!document.querySelector('#upcoming-chart svg')")
	b.eval(&answer, pushFromPageScript, `{"topic":"billing","id":"from-page","delay":0,"ttr":30,"body":"x"}`)
	if answer.Status != http.StatusOK || s.jobState("from-page") != "ready" {
		t.Errorf("a push from the page under %s: %d %s, want it done", allowedName, answer.Status, answer.Body)
	}
}
