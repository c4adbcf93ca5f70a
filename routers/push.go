package routers

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/wire"
)

// Limits of /push fields, in the units the API uses.
const (
	maxDelaySeconds = 1<<31 - 1
	maxDelayMillis  = maxDelaySeconds * 1000
	maxTTRSeconds   = int64(delayqueue.MaxTTR / time.Second)
)

// jobFields are the members of one job in /push, alone or in "jobs".
func jobFields() []string {
	return []string{"topic", "id", "body", "delay", "delay_ms", "ttr", "retry", "max_attempts", "if_absent", "callback"}
}

// pushRequest is the body of /push: one job, or with "jobs" a batch of them.
type pushRequest struct {
	Jobs  []delayqueue.Job
	Batch bool // the body was {"jobs":[...]}: the answer lists every job
}

// invalidBatchError reports every bad job of a batch; nothing is pushed.
type invalidBatchError struct {
	total int
	jobs  []wire.InvalidJob
}

func (e *invalidBatchError) Error() string {
	if len(e.jobs) == 1 {
		return fmt.Sprintf("1 of %d jobs is invalid", e.total)
	}
	return fmt.Sprintf("%d of %d jobs are invalid", len(e.jobs), e.total)
}

// decodePush parses and validates a /push body.
func decodePush(body []byte, maxJobBodyBytes int) (pushRequest, error) {
	obj, err := parseObject(body, append(jobFields(), "jobs")...)
	if err != nil {
		return pushRequest{}, err
	}
	if !obj.has("jobs") {
		job, err := decodeJob(obj, maxJobBodyBytes)
		if err != nil {
			return pushRequest{}, err
		}
		return pushRequest{Jobs: []delayqueue.Job{job}}, nil
	}

	var mixed []string
	for _, field := range jobFields() {
		if obj.has(field) {
			mixed = append(mixed, field)
		}
	}
	if len(mixed) > 0 {
		return pushRequest{}, fmt.Errorf("use either jobs (a batch) or a single job's fields, not both: got jobs and %s",
			strings.Join(mixed, ", "))
	}
	elements, err := obj.arrayField("jobs", 1, delayqueue.MaxPushBatchJobs, "jobs")
	if err != nil {
		return pushRequest{}, err
	}
	req := pushRequest{Jobs: make([]delayqueue.Job, len(elements)), Batch: true}
	invalid := &invalidBatchError{total: len(elements)}
	firstIndexOf := make(map[string]int, len(elements))
	for i, element := range elements {
		job, err := decodeBatchJob(element, maxJobBodyBytes)
		id := job.ID
		if err != nil {
			id = readableID(element)
		}
		// An id repeated within a batch is an error, even when the first
		// job is bad for another reason: all or nothing means no silent
		// last-one-wins.
		first, seen := firstIndexOf[id]
		if !seen && id != "" {
			firstIndexOf[id] = i
		}
		switch {
		case err != nil:
			invalid.jobs = append(invalid.jobs, wire.InvalidJob{Index: i, ID: id, Message: err.Error()})
		case seen:
			invalid.jobs = append(invalid.jobs, wire.InvalidJob{Index: i, ID: id,
				Message: fmt.Sprintf("id %q is already used by job %d of the batch", id, first)})
		default:
			req.Jobs[i] = job
		}
	}
	if len(invalid.jobs) > 0 {
		return pushRequest{}, invalid
	}
	return req, nil
}

// decodeBatchJob decodes one element of "jobs".
func decodeBatchJob(element json.RawMessage, maxJobBodyBytes int) (delayqueue.Job, error) {
	if element[0] != '{' {
		return delayqueue.Job{}, fmt.Errorf("a job must be a JSON object, got %s", jsonKind(element))
	}
	obj, err := collectMembers(element, jobFields())
	if err != nil {
		return delayqueue.Job{}, err
	}
	return decodeJob(obj, maxJobBodyBytes)
}

// readableID is the id of a bad batch element, trimmed, or "" when it has no
// valid id: it names the job in the failure's data (an invalid id is not
// echoed back; the index says which job it is).
func readableID(element json.RawMessage) string {
	if element[0] != '{' {
		return ""
	}
	obj, err := collectMembers(element, []string{"id"})
	if err != nil {
		return ""
	}
	id, err := obj.stringField("id")
	if err != nil {
		return ""
	}
	if id, err = checkID("id", id); err != nil {
		return ""
	}
	return id
}

// decodeJob validates the fields of one job.
func decodeJob(obj jsonObject, maxJobBodyBytes int) (delayqueue.Job, error) {
	var job delayqueue.Job

	topic, err := obj.stringField("topic")
	if err != nil {
		return delayqueue.Job{}, err
	}
	if job.Topic, err = checkTopic("topic", topic); err != nil {
		return delayqueue.Job{}, err
	}

	id, err := obj.stringField("id")
	if err != nil {
		return delayqueue.Job{}, err
	}
	if job.ID, err = checkID("id", id); err != nil {
		return delayqueue.Job{}, err
	}

	// The body is kept byte for byte: unlike the original, no trimming.
	if job.Body, err = obj.stringField("body"); err != nil {
		return delayqueue.Job{}, err
	}
	if len(job.Body) > maxJobBodyBytes {
		return delayqueue.Job{}, fmt.Errorf("body must be at most %d bytes (max_job_body_bytes), got %d bytes",
			maxJobBodyBytes, len(job.Body))
	}

	delaySeconds, err := obj.intField("delay", 0, maxDelaySeconds, "seconds")
	if err != nil {
		return delayqueue.Job{}, err
	}
	job.Delay = time.Duration(delaySeconds) * time.Second
	delayMillis, err := obj.intField("delay_ms", 0, maxDelayMillis, "milliseconds")
	if err != nil {
		return delayqueue.Job{}, err
	}
	if obj.has("delay_ms") {
		job.Delay = time.Duration(delayMillis) * time.Millisecond
	}

	if obj.has("callback") {
		// A webhook job is called by the server; its ttr is the lease of a
		// call, from the callback's timeout, so a ttr given is checked and
		// not used.
		if job.Callback, err = decodeCallback(obj["callback"]); err != nil {
			return delayqueue.Job{}, err
		}
	} else if !obj.has("ttr") {
		return delayqueue.Job{}, fmt.Errorf("ttr is required: an integer between 1 and %d (seconds)", maxTTRSeconds)
	}
	ttrSeconds, err := obj.intField("ttr", 1, maxTTRSeconds, "seconds")
	if err != nil {
		return delayqueue.Job{}, err
	}
	job.TTR = time.Duration(ttrSeconds) * time.Second

	retry, err := obj.arrayField("retry", 0, delayqueue.MaxRetryEntries, "integers (seconds)")
	if err != nil {
		return delayqueue.Job{}, err
	}
	for i, raw := range retry {
		wait, err := intValue(fmt.Sprintf("retry[%d]", i), raw, 0, delayqueue.MaxRetrySeconds, "seconds")
		if err != nil {
			return delayqueue.Job{}, err
		}
		job.Retry = append(job.Retry, int(wait))
	}

	maxAttempts, err := obj.intField("max_attempts", 0, delayqueue.MaxMaxAttempts, "0 is unlimited")
	if err != nil {
		return delayqueue.Job{}, err
	}
	job.MaxAttempts = int(maxAttempts)

	if job.IfAbsent, err = obj.boolField("if_absent"); err != nil {
		return delayqueue.Job{}, err
	}
	return job, nil
}

// checkTopic trims a topic and checks it; field names it in messages.
func checkTopic(field, topic string) (string, error) {
	topic = strings.TrimSpace(topic)
	switch {
	case topic == "":
		return "", fmt.Errorf("%s is required and must not be blank", field)
	case len(topic) > delayqueue.MaxTopicBytes:
		return "", fmt.Errorf("%s must be at most %d bytes, got %d", field, delayqueue.MaxTopicBytes, len(topic))
	case strings.Contains(topic, ","):
		return "", fmt.Errorf("%s must not contain a comma (commas separate topics in /pop)", field)
	case strings.ContainsFunc(topic, unicode.IsControl):
		return "", fmt.Errorf("%s must not contain control characters", field)
	}
	return topic, nil
}

// checkID trims a job id and checks it; field names it in messages.
func checkID(field, id string) (string, error) {
	id = strings.TrimSpace(id)
	switch {
	case id == "":
		return "", fmt.Errorf("%s is required and must not be blank", field)
	case len(id) > delayqueue.MaxIDBytes:
		return "", fmt.Errorf("%s must be at most %d bytes, got %d", field, delayqueue.MaxIDBytes, len(id))
	}
	return id, nil
}

// pushStatusName is the word of a batch answer for each PushStatus.
func pushStatusName(status delayqueue.PushStatus) string {
	switch status {
	case delayqueue.PushReplaced:
		return wire.StatusReplaced
	case delayqueue.PushExists:
		return wire.StatusExists
	case delayqueue.PushFailed:
		return wire.StatusFailed
	}
	return wire.StatusCreated
}

// push adds a job, or replaces the job with the same id (unless if_absent);
// with "jobs", a batch all or nothing.
func (h *handler) push(w http.ResponseWriter, r *http.Request) {
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	req, err := decodePush(body, h.opts.MaxJobBodyBytes)
	if err != nil {
		var invalid *invalidBatchError
		if errors.As(err, &invalid) {
			failWithData(w, r, invalid.Error(), invalid.jobs)
			return
		}
		fail(w, r, err.Error())
		return
	}
	if req.Batch {
		h.pushBatch(w, r, req.Jobs)
		return
	}

	job := req.Jobs[0]
	noteJob(r, job.Topic, job.ID)
	result, err := h.queue.Push(r.Context(), job)
	if err != nil {
		h.failQueue(w, r, "push", err)
		return
	}
	switch {
	case result.Status == delayqueue.PushExists:
		succeed(w, r, "not pushed: a job with this id exists (if_absent)", wire.IfAbsentResult{Exists: true})
	case job.IfAbsent:
		succeed(w, r, "pushed", wire.IfAbsentResult{Exists: false})
	case result.Status == delayqueue.PushReplaced:
		// Without if_absent the data stays null, as in the original.
		succeed(w, r, "pushed, replacing the job with the same id", nil)
	default:
		succeed(w, r, "pushed", nil)
	}
}

func (h *handler) pushBatch(w http.ResponseWriter, r *http.Request, jobs []delayqueue.Job) {
	noteJob(r, jobs[0].Topic, jobs[0].ID)
	results, err := h.queue.PushBatch(r.Context(), jobs)
	if errors.Is(err, delayqueue.ErrPartial) && len(results) == len(jobs) {
		h.partlyPushed(w, r, jobs, results, err)
		return
	}
	if err != nil {
		h.failQueue(w, r, "push batch", err)
		return
	}
	if len(results) != len(jobs) {
		h.failQueue(w, r, "push batch", fmt.Errorf("engine answered %d results for %d jobs", len(results), len(jobs)))
		return
	}
	pushed := make([]wire.PushResult, len(jobs))
	for i, result := range results {
		pushed[i] = wire.PushResult{ID: jobs[i].ID, Status: pushStatusName(result.Status)}
	}
	succeed(w, r, fmt.Sprintf("pushed %d jobs", len(jobs)), pushed)
}

// partlyPushed answers a batch of which some partitions stored their jobs
// and others failed.
func (h *handler) partlyPushed(w http.ResponseWriter, r *http.Request, jobs []delayqueue.Job, results []delayqueue.PushResult, err error) {
	h.logger.LogAttrs(r.Context(), slog.LevelWarn, "batch push partly stored", slog.String(logKeyErr, err.Error()))
	outcomes := make([]wire.BatchResult, len(jobs))
	failed := 0
	for i, result := range results {
		outcomes[i] = wire.BatchResult{Index: i, ID: jobs[i].ID, Status: pushStatusName(result.Status)}
		if result.Status == delayqueue.PushFailed {
			failed++
			_, outcomes[i].Message = partFailure(result.Err)
		}
	}
	reason, _ := partFailure(err)
	failWithData(w, r, fmt.Sprintf(msgPartlyDone, failed, len(jobs), partVerb(err, "stored"), reason, "pushing"), outcomes)
}

// decodeCallback reads the "callback" object of a webhook job: url,
// method, headers, timeout and follow_redirects.
func decodeCallback(raw json.RawMessage) (*delayqueue.Callback, error) {
	if raw[0] != '{' {
		return nil, fmt.Errorf("callback must be a JSON object with a url, got %s", jsonKind(raw))
	}
	obj, err := collectMembers(raw, []string{"url", "method", "headers", "timeout", "follow_redirects"})
	if err != nil {
		return nil, fmt.Errorf("callback: %w", err)
	}
	var cb delayqueue.Callback
	if !obj.has("url") {
		return nil, errors.New("callback.url is required: an http or https URL")
	}
	if cb.URL, err = stringValue("callback.url", obj["url"]); err != nil {
		return nil, err
	}
	if obj.has("method") {
		if cb.Method, err = stringValue("callback.method", obj["method"]); err != nil {
			return nil, err
		}
		cb.Method = strings.ToUpper(cb.Method)
	}
	timeout, err := intValueIfPresent(obj, "timeout", "callback.timeout", 1, int64(delayqueue.MaxCallbackTimeout/time.Second))
	if err != nil {
		return nil, err
	}
	cb.TimeoutSeconds = int(timeout)
	if cb.FollowRedirects, err = obj.boolField("follow_redirects"); err != nil {
		return nil, fmt.Errorf("callback.%w", err)
	}
	if obj.has("headers") {
		headers := obj["headers"]
		if headers[0] != '{' {
			return nil, fmt.Errorf("callback.headers must be an object of strings, got %s", jsonKind(headers))
		}
		var members map[string]json.RawMessage
		if err := json.Unmarshal(headers, &members); err != nil {
			return nil, fmt.Errorf("callback.headers: %w", err)
		}
		if len(members) > maxCallbackHeaders {
			return nil, fmt.Errorf("callback.headers may hold at most %d headers", maxCallbackHeaders)
		}
		cb.Headers = make(map[string]string, len(members))
		for name, value := range members {
			v, err := stringValue("callback.headers."+name, value)
			if err != nil {
				return nil, err
			}
			cb.Headers[name] = v
		}
	}
	if err := cb.Validate(); err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), delayqueue.ErrInvalidJob.Error()+": "))
	}
	return &cb, nil
}

// maxCallbackHeaders bounds the extra headers of one callback.
const maxCallbackHeaders = 50

// intValueIfPresent is intValue for an optional member: 0 when absent.
func intValueIfPresent(obj jsonObject, member, name string, min, max int64) (int64, error) {
	if !obj.has(member) {
		return 0, nil
	}
	return intValue(name, obj[member], min, max, "seconds")
}
