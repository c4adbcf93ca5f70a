package routers

import (
	"bytes"
	"net/http"
	"time"

	"github.com/delay-queue/delay-queue/wire"
)

// statsRequest is the body of /stats: one topic, or ("") all of them.
type statsRequest struct {
	Topic string
}

// decodeStats accepts an empty body, as /topics does: no field is needed.
func decodeStats(body []byte) (statsRequest, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return statsRequest{}, nil
	}
	obj, err := parseObject(body, "topic")
	if err != nil {
		return statsRequest{}, err
	}
	if !obj.has("topic") {
		return statsRequest{}, nil
	}
	topic, err := decodeTopicObject(obj)
	return statsRequest{Topic: topic}, err
}

// decodeTopics accepts an empty body or any JSON object: /topics takes no
// parameters.
func decodeTopics(body []byte) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	_, err := parseObject(body)
	return err
}

// stats answers the count of jobs in each state, per topic. The engine keeps
// counters, so this costs O(topics).
func (h *handler) stats(w http.ResponseWriter, r *http.Request) {
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	req, err := decodeStats(body)
	if err != nil {
		fail(w, r, err.Error())
		return
	}
	noteJob(r, req.Topic, "")
	stats, err := h.queue.Stats(r.Context(), req.Topic)
	if err != nil {
		h.failQueue(w, r, "stats", err)
		return
	}
	counts := make(map[string]wire.TopicStats, len(stats))
	for topic, s := range stats {
		counts[topic] = wire.TopicStats{Delay: s.Delay, Ready: s.Ready, Reserved: s.Reserved, Dead: s.Dead}
	}
	succeed(w, r, "ok", counts)
}

// topics lists the topics that hold jobs, sorted.
func (h *handler) topics(w http.ResponseWriter, r *http.Request) {
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	if err := decodeTopics(body); err != nil {
		fail(w, r, err.Error())
		return
	}
	topics, err := h.queue.Topics(r.Context())
	if err != nil {
		h.failQueue(w, r, "topics", err)
		return
	}
	if topics == nil {
		topics = []string{}
	}
	succeed(w, r, "ok", topics)
}

// maxUpcomingMinutes bounds /upcoming: one day of one-minute slots.
const maxUpcomingMinutes = 1440

// upcoming counts the jobs due per minute for the next minutes (default
// 60), for the dashboard's chart. It costs a ZLEXCOUNT per minute, partition and timer,
// not a scan of the jobs.
func (h *handler) upcoming(w http.ResponseWriter, r *http.Request) {
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	minutes := int64(60)
	if len(bytes.TrimSpace(body)) > 0 {
		obj, err := parseObject(body, "minutes")
		if err != nil {
			fail(w, r, err.Error())
			return
		}
		if obj.has("minutes") {
			if minutes, err = obj.intField("minutes", 1, maxUpcomingMinutes, "minutes"); err != nil {
				fail(w, r, err.Error())
				return
			}
		}
	}
	start, counts, err := h.queue.Upcoming(r.Context(), time.Minute, int(minutes))
	if err != nil {
		h.failQueue(w, r, "upcoming", err)
		return
	}
	succeed(w, r, "ok", wire.Upcoming{Start: start.Unix(), StartMS: start.UnixMilli(), StepSeconds: 60, Counts: counts})
}
