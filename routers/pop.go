package routers

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/wire"
)

// popRequest is the body of /pop: "topic" lists one or more topics
// separated by commas; "timeout" (seconds) shortens the hold; "count" asks
// for up to that many jobs at once.
type popRequest struct {
	Topics []string
	Hold   time.Duration
	// Count is 0 when the request has no count: the answer then keeps the
	// original's shape (one job or null) rather than an array.
	Count int
}

// decodePop parses and validates a /pop body. blockTimeout is both the
// default hold and the largest timeout accepted.
func decodePop(body []byte, blockTimeout time.Duration) (popRequest, error) {
	obj, err := parseObject(body, "topic", "timeout", "count")
	if err != nil {
		return popRequest{}, err
	}
	list, err := obj.stringField("topic")
	if err != nil {
		return popRequest{}, err
	}
	if strings.TrimSpace(list) == "" {
		return popRequest{}, errors.New("topic is required: one topic or several separated by commas")
	}
	parts := strings.Split(list, ",")
	if len(parts) > delayqueue.MaxPopTopics {
		return popRequest{}, fmt.Errorf("topic lists %d topics: at most %d are allowed", len(parts), delayqueue.MaxPopTopics)
	}
	req := popRequest{Topics: make([]string, 0, len(parts)), Hold: blockTimeout}
	for i, part := range parts {
		field := "topic"
		if len(parts) > 1 {
			field = fmt.Sprintf("topic %d of %d", i+1, len(parts))
		}
		topic, err := checkTopic(field, part)
		if err != nil {
			return popRequest{}, err
		}
		// The first listed topic wins when several have jobs, so a
		// repeat adds nothing.
		if !slices.Contains(req.Topics, topic) {
			req.Topics = append(req.Topics, topic)
		}
	}

	maxTimeout := int64(blockTimeout / time.Second)
	timeout, err := obj.intField("timeout", 0, maxTimeout, "seconds, at most queue_block_timeout")
	if err != nil {
		return popRequest{}, err
	}
	if obj.has("timeout") {
		req.Hold = time.Duration(timeout) * time.Second
	}

	count, err := obj.intField("count", 1, delayqueue.MaxPopCount, "")
	if err != nil {
		return popRequest{}, err
	}
	req.Count = int(count)
	return req, nil
}

// pop holds the request until a job of one of the topics is ready or the
// hold ends. The request context ends the hold early when the client goes.
func (h *handler) pop(w http.ResponseWriter, r *http.Request) {
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	req, err := decodePop(body, h.opts.BlockTimeout)
	if err != nil {
		fail(w, r, err.Error())
		return
	}
	noteJob(r, strings.Join(req.Topics, ","), "")
	if req.Count > 0 {
		h.popBatch(w, r, req)
		return
	}
	delivery, err := h.queue.Pop(r.Context(), req.Topics, req.Hold)
	if err != nil {
		h.failQueue(w, r, "pop", err)
		return
	}
	if delivery == nil {
		succeed(w, r, "no job ready", nil)
		return
	}
	noteJob(r, delivery.Topic, delivery.ID)
	succeed(w, r, "ok", newDelivery(delivery))
}

// popBatch answers a /pop with count: always an array, [] when the hold
// ends empty.
func (h *handler) popBatch(w http.ResponseWriter, r *http.Request, req popRequest) {
	deliveries, err := h.queue.PopBatch(r.Context(), req.Topics, req.Count, req.Hold)
	if err != nil {
		h.failQueue(w, r, "pop", err)
		return
	}
	views := make([]wire.Delivery, 0, len(deliveries))
	for _, d := range deliveries {
		views = append(views, newDelivery(d))
	}
	switch len(views) {
	case 0:
		succeed(w, r, "no job ready", views)
	case 1:
		noteJob(r, views[0].Topic, views[0].ID)
		succeed(w, r, "ok", views)
	default:
		succeed(w, r, fmt.Sprintf("%d jobs", len(views)), views)
	}
}

// appendPlainDelivery appends v as the JSON encoder writes it, when its
// text needs no escaping (see isPlainJSONText): a /pop's answer, the most
// frequent, is then written without the encoder's reflection. ok false
// leaves it to the encoder. TestPlainEnvelopesMatchEncoder holds the two
// to the same bytes.
func appendPlainDelivery(b []byte, v wire.Delivery) (_ []byte, ok bool) {
	if !isPlainJSONText(v.ID) || !isPlainJSONText(v.Body) || !isPlainJSONText(v.Topic) {
		return b, false
	}
	b = append(b, `{"id":"`...)
	b = append(b, v.ID...)
	b = append(b, `","body":"`...)
	b = append(b, v.Body...)
	b = append(b, `","topic":"`...)
	b = append(b, v.Topic...)
	b = append(b, `","ttr":`...)
	b = strconv.AppendInt(b, v.TTR, 10)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(v.Attempts), 10)
	return append(b, '}'), true
}

// newDelivery is the engine's delivery as /pop answers it.
func newDelivery(d *delayqueue.Delivery) wire.Delivery {
	return wire.Delivery{
		ID:       d.ID,
		Body:     d.Body,
		Topic:    d.Topic,
		TTR:      int64(d.TTR / time.Second),
		Attempts: d.Attempts,
	}
}
