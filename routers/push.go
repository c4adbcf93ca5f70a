package routers

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/delay-queue/delay-queue/delayqueue"
)

// Limits of /push fields, in the units the API uses.
const (
	maxDelaySeconds = 1<<31 - 1
	maxDelayMillis  = maxDelaySeconds * 1000
	maxTTRSeconds   = int64(delayqueue.MaxTTR / time.Second)
)

// pushRequest is the body of /push. Delay comes from "delay" (seconds) or,
// when given, "delay_ms" (milliseconds), which replaces it.
type pushRequest struct {
	Topic string
	ID    string
	Body  string
	Delay time.Duration
	TTR   time.Duration
}

// decodePush parses and validates a /push body.
func decodePush(body []byte, maxJobBodyBytes int) (pushRequest, error) {
	obj, err := parseObject(body, "topic", "id", "body", "delay", "delay_ms", "ttr")
	if err != nil {
		return pushRequest{}, err
	}
	var req pushRequest

	topic, err := obj.stringField("topic")
	if err != nil {
		return pushRequest{}, err
	}
	if req.Topic, err = checkTopic("topic", topic); err != nil {
		return pushRequest{}, err
	}

	id, err := obj.stringField("id")
	if err != nil {
		return pushRequest{}, err
	}
	if req.ID, err = checkID(id); err != nil {
		return pushRequest{}, err
	}

	// The body is kept byte for byte: unlike the original, no trimming.
	if req.Body, err = obj.stringField("body"); err != nil {
		return pushRequest{}, err
	}
	if len(req.Body) > maxJobBodyBytes {
		return pushRequest{}, fmt.Errorf("body must be at most %d bytes (max_job_body_bytes), got %d bytes",
			maxJobBodyBytes, len(req.Body))
	}

	delaySeconds, err := obj.intField("delay", 0, maxDelaySeconds, "seconds")
	if err != nil {
		return pushRequest{}, err
	}
	req.Delay = time.Duration(delaySeconds) * time.Second
	delayMillis, err := obj.intField("delay_ms", 0, maxDelayMillis, "milliseconds")
	if err != nil {
		return pushRequest{}, err
	}
	if obj.has("delay_ms") {
		req.Delay = time.Duration(delayMillis) * time.Millisecond
	}

	if !obj.has("ttr") {
		return pushRequest{}, fmt.Errorf("ttr is required: an integer between 1 and %d (seconds)", maxTTRSeconds)
	}
	ttrSeconds, err := obj.intField("ttr", 1, maxTTRSeconds, "seconds")
	if err != nil {
		return pushRequest{}, err
	}
	req.TTR = time.Duration(ttrSeconds) * time.Second
	return req, nil
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

// checkID trims a job id and checks it.
func checkID(id string) (string, error) {
	id = strings.TrimSpace(id)
	switch {
	case id == "":
		return "", errors.New("id is required and must not be blank")
	case len(id) > delayqueue.MaxIDBytes:
		return "", fmt.Errorf("id must be at most %d bytes, got %d", delayqueue.MaxIDBytes, len(id))
	}
	return id, nil
}

// push adds a job, or replaces the job with the same id.
func (h *handler) push(w http.ResponseWriter, r *http.Request) {
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	req, err := decodePush(body, h.opts.MaxJobBodyBytes)
	if err != nil {
		fail(w, r, err.Error())
		return
	}
	noteJob(r, req.Topic, req.ID)
	job := delayqueue.Job{Topic: req.Topic, ID: req.ID, Delay: req.Delay, TTR: req.TTR, Body: req.Body}
	result, err := h.queue.Push(r.Context(), job)
	if err != nil {
		h.failQueue(w, r, "push", err)
		return
	}
	message := "pushed"
	if result.Status == delayqueue.PushReplaced {
		message = "pushed, replacing the job with the same id"
	}
	succeed(w, r, message, nil)
}
