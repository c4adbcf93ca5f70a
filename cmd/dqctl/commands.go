package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/delay-queue/delay-queue/client"
)

// durationValue is a flag holding whole seconds ("30") or a Go duration
// ("1m30s").
type durationValue struct {
	d   *time.Duration
	set bool
}

func (v *durationValue) String() string {
	if v.d == nil {
		return ""
	}
	return v.d.String()
}

func (v *durationValue) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	*v.d, v.set = d, true
	return nil
}

// parseDuration reads whole seconds or a Go duration, not negative.
func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var d time.Duration
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		d = time.Duration(n) * time.Second
	} else if d, err = time.ParseDuration(s); err != nil {
		return 0, fmt.Errorf("%q is neither whole seconds nor a duration such as 1m30s", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative", s)
	}
	return d, nil
}

// durationList is a flag holding a comma-separated list of durations.
type durationList struct{ list *[]time.Duration }

func (v durationList) String() string {
	if v.list == nil {
		return ""
	}
	parts := make([]string, len(*v.list))
	for i, d := range *v.list {
		parts[i] = d.String()
	}
	return strings.Join(parts, ",")
}

func (v durationList) Set(s string) error {
	*v.list = nil
	for part := range strings.SplitSeq(s, ",") {
		d, err := parseDuration(part)
		if err != nil {
			return err
		}
		*v.list = append(*v.list, d)
	}
	return nil
}

func cmdPush(ctx context.Context, a *app, args []string) error {
	fs := a.flagSet("push")
	var job client.PushJob
	job.TTR = time.Minute
	fs.StringVar(&job.Topic, "topic", "", "topic of the job")
	fs.StringVar(&job.ID, "id", "", "job id (pushing an existing id replaces that job)")
	delay := &durationValue{d: &job.Delay}
	fs.Var(delay, "delay", "wait before the job is ready (0: now)")
	fs.Var(&durationValue{d: &job.TTR}, "ttr", "time to run: a delivery not finished within it is redelivered")
	fs.StringVar(&job.Body, "body", "", "job body")
	bodyFile := fs.String("body-file", "", "read the body from this file (- for stdin)")
	fs.Var(durationList{&job.Retry}, "retry", "retry schedule: waits before each redelivery, e.g. 120,600,1h")
	fs.IntVar(&job.MaxAttempts, "max-attempts", 0, "deliveries before the dead letters (0: unlimited, or len(retry)+1)")
	fs.BoolVar(&job.IfAbsent, "if-absent", false, "leave an existing job with this id alone")
	file := fs.String("file", "", "push every job of a JSON-lines file (- for stdin), one API /push object per line")
	batch := fs.Int("batch", 500, "jobs per request with --file (1 to 1000)")
	positional, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(positional) > 0 {
		return usagef("unexpected argument %q", positional[0])
	}

	if *file != "" {
		jobFlags := 0
		for _, name := range []string{"topic", "id", "delay", "ttr", "body", "body-file", "retry", "max-attempts", "if-absent"} {
			if isSet(fs, name) {
				jobFlags++
			}
		}
		if jobFlags > 0 {
			return usagef("--file takes the jobs from the file: drop the job flags")
		}
		if *batch < 1 || *batch > 1000 {
			return usagef("--batch must be between 1 and 1000, got %d", *batch)
		}
		return pushFile(ctx, a, *file, *batch)
	}

	if job.Topic == "" || job.ID == "" {
		return usagef("--topic and --id are required (or --file)")
	}
	if *bodyFile != "" {
		if isSet(fs, "body") {
			return usagef("give --body or --body-file, not both")
		}
		body, err := readFileOrStdin(*bodyFile)
		if err != nil {
			return err
		}
		job.Body = string(body)
	}
	existed, err := a.client.Push(ctx, job)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(struct {
			ID     string `json:"id"`
			Exists bool   `json:"exists"`
		}{job.ID, existed})
	}
	if existed {
		fmt.Fprintf(a.stdout, "job %s exists: left unchanged (--if-absent)\n", job.ID)
		return nil
	}
	fmt.Fprintf(a.stdout, "pushed %s to %s, ready %s\n", job.ID, job.Topic, describeDelay(job.Delay))
	return nil
}

func describeDelay(d time.Duration) string {
	if d == 0 {
		return "now"
	}
	return "in " + d.String()
}

func readFileOrStdin(path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(os.Stdin)
	}
	return os.ReadFile(path)
}

func cmdPop(ctx context.Context, a *app, args []string) error {
	fs := a.flagSet("pop")
	var hold time.Duration
	fs.Var(&durationValue{d: &hold}, "timeout", "how long to wait for a job (0: don't wait)")
	count := fs.Int("count", 0, "take up to this many jobs at once (1 to 100); 0 takes one")
	positional, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	var topics []string
	for _, arg := range positional {
		topics = append(topics, strings.Split(arg, ",")...)
	}
	if len(topics) == 0 {
		return usagef("give at least one topic")
	}
	if *count < 0 || *count > 100 {
		return usagef("--count must be between 1 and 100, got %d", *count)
	}

	var jobs []client.Job
	if *count == 0 {
		job, err := a.client.Pop(ctx, topics, hold)
		if err != nil {
			return err
		}
		if a.json {
			return a.printJSON(job)
		}
		if job != nil {
			jobs = append(jobs, *job)
		}
	} else {
		if jobs, err = a.client.PopN(ctx, topics, *count, hold); err != nil {
			return err
		}
		if a.json {
			return a.printJSON(jobs)
		}
	}
	if len(jobs) == 0 {
		fmt.Fprintln(a.stderr, "no job ready")
		return nil
	}
	t := a.table("ID", "TOPIC", "ATTEMPTS", "TTR", "BODY")
	for _, job := range jobs {
		t.row(job.ID, job.Topic, strconv.Itoa(job.Attempts), job.TTR.String(), preview(job.Body))
	}
	return t.flush()
}

func cmdFinish(ctx context.Context, a *app, args []string) error {
	fs := a.flagSet("finish")
	attempt := fs.Int("attempt", 0, "the delivery's attempts from pop (one id): refused if the job was delivered again since")
	ids, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return usagef("give at least one job id")
	}
	var result client.FinishResult
	if isSet(fs, "attempt") {
		if len(ids) != 1 || *attempt < 1 {
			return usagef("--attempt takes one job id and an attempt of at least 1")
		}
		if err = a.client.FinishDelivery(ctx, ids[0], *attempt); err != nil {
			return err
		}
		// An unknown id is finished too, as without --attempt.
		result.Finished = 1
	} else if result, err = a.client.FinishIDs(ctx, ids); err != nil && len(result.Dead) == 0 && !isPartial(err) {
		return err
	}
	if result.Dead == nil {
		result.Dead = []string{}
	}
	failed := failedIDs(err)
	if a.json {
		out := struct {
			client.FinishResult
			Failed []client.BatchResult `json:"failed,omitempty"`
		}{result, failed}
		if jsonErr := a.printJSON(out); jsonErr != nil {
			return jsonErr
		}
	} else {
		fmt.Fprintf(a.stdout, "finished %d\n", result.Finished)
		for _, id := range result.Dead {
			fmt.Fprintf(a.stdout, "not finished, dead-lettered: %s\n", id)
		}
		printFailed(a, "finished", failed)
	}
	return err
}

// isPartial reports whether err is a batch the server handled in part.
func isPartial(err error) bool {
	var partial *client.PartialBatchError
	return errors.As(err, &partial)
}

// failedIDs are the ids a batch handled in part did not handle, nil for
// any other outcome.
func failedIDs(err error) []client.BatchResult {
	var partial *client.PartialBatchError
	if errors.As(err, &partial) {
		return partial.Failed()
	}
	return nil
}

// printFailed lists the ids a batch did not handle, with the server's
// reason each.
func printFailed(a *app, done string, failed []client.BatchResult) {
	for _, r := range failed {
		fmt.Fprintf(a.stdout, "not %s (%s): %s\n", done, r.Message, r.ID)
	}
}

func cmdDelete(ctx context.Context, a *app, args []string) error {
	fs := a.flagSet("delete")
	ids, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return usagef("give at least one job id")
	}
	deleted, err := a.client.DeleteIDs(ctx, ids)
	if err != nil && !isPartial(err) {
		return err
	}
	failed := failedIDs(err)
	if a.json {
		out := struct {
			Deleted int                  `json:"deleted"`
			Failed  []client.BatchResult `json:"failed,omitempty"`
		}{deleted, failed}
		if jsonErr := a.printJSON(out); jsonErr != nil {
			return jsonErr
		}
		return err
	}
	fmt.Fprintf(a.stdout, "deleted %d of %d\n", deleted, len(ids))
	printFailed(a, "deleted", failed)
	return err
}

func cmdGet(ctx context.Context, a *app, args []string) error {
	fs := a.flagSet("get")
	positional, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(positional) != 1 {
		return usagef("give one job id")
	}
	id := positional[0]
	info, err := a.client.Get(ctx, id)
	if err != nil {
		return err
	}
	if a.json {
		if err := a.printJSON(info); err != nil {
			return err
		}
	}
	if info == nil {
		fmt.Fprintf(a.stderr, "dqctl get: job %s not found\n", id)
		return errReported
	}
	if a.json {
		return nil
	}
	t := a.table()
	t.row("ID", info.ID)
	t.row("TOPIC", info.Topic)
	t.row("STATE", info.State)
	t.row("ATTEMPTS", attemptsOf(info))
	t.row("DUE", formatTime(info.Due))
	t.row("TTR", info.TTR.String())
	if len(info.Retry) > 0 {
		t.row("RETRY", durationList{&info.Retry}.String())
	}
	t.row("CREATED", formatTime(info.CreatedAt))
	if !info.LeaseUntil.IsZero() {
		t.row("LEASE UNTIL", formatTime(info.LeaseUntil))
	}
	if info.DeadReason != "" || !info.DeadAt.IsZero() {
		t.row("DEAD", info.DeadReason+" at "+formatTime(info.DeadAt))
	}
	t.row("BODY", preview(info.Body))
	return t.flush()
}

func attemptsOf(info *client.JobInfo) string {
	if info.AttemptsLimit > 0 {
		return fmt.Sprintf("%d of %d", info.Attempts, info.AttemptsLimit)
	}
	return strconv.Itoa(info.Attempts)
}

func cmdRelease(ctx context.Context, a *app, args []string) error {
	fs := a.flagSet("release")
	var delay time.Duration
	delayFlag := &durationValue{d: &delay}
	fs.Var(delayFlag, "delay", "ready again after this wait, instead of the retry schedule's next one")
	attempt := fs.Int("attempt", 0, "the delivery's attempts from pop: refused if the job was delivered again since")
	positional, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(positional) != 1 {
		return usagef("give one job id")
	}
	opts := client.ReleaseOptions{Attempt: *attempt}
	if delayFlag.set {
		opts.Delay = &delay
	}
	result, err := a.client.Release(ctx, positional[0], opts)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(result)
	}
	if result.State == client.StateDead {
		fmt.Fprintf(a.stdout, "released %s: attempts used up, dead-lettered\n", positional[0])
		return nil
	}
	fmt.Fprintf(a.stdout, "released %s: %s, due %s\n", positional[0], result.State, formatTime(result.Due))
	return nil
}

func cmdTouch(ctx context.Context, a *app, args []string) error {
	fs := a.flagSet("touch")
	attempt := fs.Int("attempt", 0, "the delivery's attempts from pop: refused if the job was delivered again since")
	positional, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(positional) != 1 {
		return usagef("give one job id")
	}
	leaseUntil, err := a.client.Touch(ctx, positional[0], *attempt)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(map[string]int64{"lease_until": leaseUntil.Unix(), "lease_until_ms": leaseUntil.UnixMilli()})
	}
	fmt.Fprintf(a.stdout, "lease of %s extended until %s\n", positional[0], formatTime(leaseUntil))
	return nil
}

func cmdStats(ctx context.Context, a *app, args []string) error {
	fs := a.flagSet("stats")
	positional, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(positional) > 1 {
		return usagef("give at most one topic")
	}
	topic := ""
	if len(positional) == 1 {
		topic = positional[0]
	}
	stats, err := a.client.Stats(ctx, topic)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(stats)
	}
	topics := make([]string, 0, len(stats))
	for name := range stats {
		topics = append(topics, name)
	}
	sort.Strings(topics)
	t := a.table("TOPIC", "DELAY", "READY", "RESERVED", "DEAD")
	for _, name := range topics {
		s := stats[name]
		t.row(name, itoa(s.Delay), itoa(s.Ready), itoa(s.Reserved), itoa(s.Dead))
	}
	return t.flush()
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func cmdTopics(ctx context.Context, a *app, args []string) error {
	fs := a.flagSet("topics")
	positional, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(positional) > 0 {
		return usagef("unexpected argument %q", positional[0])
	}
	topics, err := a.client.Topics(ctx)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(topics)
	}
	for _, topic := range topics {
		fmt.Fprintln(a.stdout, topic)
	}
	return nil
}

func cmdDead(ctx context.Context, a *app, args []string) error {
	if len(args) > 0 && slices.Contains([]string{"-h", "-help", "--h", "--help"}, args[0]) {
		return &helpRequest{flags: a.flagSet("dead")}
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return usagef("give a dead-letter command: list, kick or delete")
	}
	switch args[0] {
	case "list":
		return cmdDeadList(ctx, a, args[1:])
	case "kick":
		return cmdDeadKick(ctx, a, args[1:])
	case "delete":
		return cmdDeadDelete(ctx, a, args[1:])
	}
	return usagef("unknown dead-letter command %q: use list, kick or delete", args[0])
}

func cmdDeadList(ctx context.Context, a *app, args []string) error {
	fs := a.flagSet("dead list")
	offset := fs.Int("offset", 0, "skip this many (newest first)")
	limit := fs.Int("limit", 50, "show at most this many (1 to 1000)")
	positional, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(positional) != 1 {
		return usagef("give one topic")
	}
	if *limit < 1 || *limit > 1000 {
		return usagef("--limit must be between 1 and 1000")
	}
	if *offset < 0 {
		return usagef("--offset must not be negative")
	}
	page, err := a.client.DeadList(ctx, positional[0], *offset, *limit)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(page)
	}
	t := a.table("ID", "ATTEMPTS", "REASON", "DEAD AT", "BODY")
	for _, job := range page.Jobs {
		t.row(job.ID, strconv.Itoa(job.Attempts), job.Reason, formatTime(job.DeadAt), preview(job.Body))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(page.Jobs) == 0 {
		fmt.Fprintf(a.stderr, "%d dead letters in %s, none shown from offset %d\n", page.Total, positional[0], *offset)
		return nil
	}
	fmt.Fprintf(a.stderr, "%d to %d of %d dead letters in %s\n", *offset+1, *offset+len(page.Jobs), page.Total, positional[0])
	return nil
}

func cmdDeadKick(ctx context.Context, a *app, args []string) error {
	fs := a.flagSet("dead kick")
	count := fs.Int("count", 0, "kick this many of the oldest (1 to 1000)")
	positional, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	var kicked []string
	switch {
	case len(positional) == 2 && !isSet(fs, "count"):
		kicked, err = a.client.DeadKick(ctx, positional[0], positional[1])
	case len(positional) == 1 && isSet(fs, "count"):
		kicked, err = a.client.DeadKickOldest(ctx, positional[0], *count)
	default:
		return usagef("give a topic and either a job id or --count")
	}
	if err != nil {
		return err
	}
	if a.json {
		if err := a.printJSON(map[string][]string{"kicked": kicked}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(a.stdout, "kicked %d back to ready\n", len(kicked))
		for _, id := range kicked {
			fmt.Fprintln(a.stdout, id)
		}
	}
	if len(positional) == 2 && len(kicked) == 0 {
		fmt.Fprintf(a.stderr, "dqctl dead kick: job %s is not in the dead letters of %s\n", positional[1], positional[0])
		return errReported
	}
	return nil
}

func cmdDeadDelete(ctx context.Context, a *app, args []string) error {
	fs := a.flagSet("dead delete")
	all := fs.Bool("all", false, "delete every dead letter of the topic")
	positional, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	var deleted int
	switch {
	case len(positional) == 2 && !*all:
		deleted, err = a.client.DeadDelete(ctx, positional[0], positional[1])
	case len(positional) == 1 && *all:
		deleted, err = a.client.DeadDeleteAll(ctx, positional[0])
	default:
		return usagef("give a topic and either a job id or --all")
	}
	if err != nil {
		return err
	}
	if a.json {
		if err := a.printJSON(map[string]int{"deleted": deleted}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(a.stdout, "deleted %d\n", deleted)
	}
	if len(positional) == 2 && deleted == 0 {
		fmt.Fprintf(a.stderr, "dqctl dead delete: job %s is not in the dead letters of %s\n", positional[1], positional[0])
		return errReported
	}
	return nil
}
