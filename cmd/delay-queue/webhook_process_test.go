package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/internal/redistest"
	"github.com/delay-queue/delay-queue/wire"
)

// TestProcessWebhookScenario is the seeds' notification scenario through the
// built server: one push with a callback and a retry schedule; the receiver
// fails twice, then succeeds; a second job whose receiver always fails ends
// in the dead letters with reason callback-failed.
func TestProcessWebhookScenario(t *testing.T) {
	const secret = "s3cret-for-the-test"
	type call struct {
		path, attempt string
		at            time.Time
	}
	var (
		mu    sync.Mutex
		calls []call
	)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(r.Header.Get("X-DelayQueue-Timestamp") + "." + string(body)))
		if hex.EncodeToString(mac.Sum(nil)) != r.Header.Get("X-DelayQueue-Signature") {
			t.Errorf("call %s: the signature does not verify", r.URL.Path)
		}
		mu.Lock()
		calls = append(calls, call{r.URL.Path, r.Header.Get("X-DelayQueue-Attempt"), time.Now()})
		n := 0
		for _, c := range calls {
			if c.path == r.URL.Path {
				n++
			}
		}
		mu.Unlock()
		if r.URL.Path == "/flaky" && n >= 3 {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		http.Error(w, "not now", http.StatusServiceUnavailable)
	}))
	defer receiver.Close()

	rs := redistest.Start(t)
	server := startProcServer(t, "W", rs.Addr, "callback_allow = 127.0.0.1", "callback_secret = "+secret)
	api := newProcClient()
	defer api.close()
	api.mustOK(t, server, "/push", map[string]any{"topic": "notify", "id": "pay-1", "body": `{"paid":true}`,
		"retry": []int{1, 1, 1}, "callback": map[string]any{"url": receiver.URL + "/flaky", "timeout": 5}})
	api.mustOK(t, server, "/push", map[string]any{"topic": "notify", "id": "pay-2", "body": "x",
		"retry": []int{1}, "callback": map[string]any{"url": receiver.URL + "/down"}})
	// A callback job is never handed to /pop.
	if job := api.mustPop(t, server, "notify", 1); job != nil {
		t.Fatalf("a callback job was popped: %+v", job)
	}

	deadline := time.Now().Add(30 * time.Second)
	for {
		env := api.mustOK(t, server, "/get", map[string]any{"id": "pay-2"})
		var info wire.JobInfo
		_ = json.Unmarshal(env.Data, &info)
		flaky := api.mustOK(t, server, "/get", map[string]any{"id": "pay-1"})
		if info.State == "dead" && flaky.dataIsNull() {
			if info.DeadReason != "callback-failed" || info.LastStatus == nil || *info.LastStatus != 503 {
				t.Fatalf("dead letter %s: want reason callback-failed and last_status 503", env.Data)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pay-1 not finished or pay-2 not dead-lettered in time: %s / %s", flaky.Data, env.Data)
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	var flaky, down []call
	for _, c := range calls {
		if c.path == "/flaky" {
			flaky = append(flaky, c)
		} else {
			down = append(down, c)
		}
	}
	if len(flaky) != 3 || len(down) != 2 {
		t.Fatalf("%d calls to /flaky (want 3: two failures, then success) and %d to /down (want 2: max attempts)", len(flaky), len(down))
	}
	for i, c := range flaky {
		if c.attempt != strconv.Itoa(i+1) {
			t.Errorf("call %d carried attempt %q", i+1, c.attempt)
		}
		if i > 0 && c.at.Sub(flaky[i-1].at) < 900*time.Millisecond {
			t.Errorf("call %d came %v after the previous one, before the 1 s retry", i+1, c.at.Sub(flaky[i-1].at))
		}
	}
	dead := api.mustOK(t, server, "/dead/list", map[string]any{"topic": "notify"})
	var list wire.DeadPage
	if err := json.Unmarshal(dead.Data, &list); err != nil || list.Total != 1 {
		t.Fatalf("/dead/list = %s", dead.Data)
	}
}
