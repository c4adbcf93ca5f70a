package routers

import (
	"errors"
	"fmt"
	"math"
	"net/http"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/wire"
)

// Paging of /dead/list.
const (
	defaultDeadListLimit = 50
	maxDeadListOffset    = math.MaxInt32
)

// deadListRequest is the body of /dead/list.
type deadListRequest struct {
	Topic  string
	Offset int
	Limit  int
}

// deadKickRequest is the body of /dead/kick: one id, or the Count oldest.
type deadKickRequest struct {
	Topic string
	ID    string
	Count int
}

// deadDeleteRequest is the body of /dead/delete: one id, or (ID "") all.
type deadDeleteRequest struct {
	Topic string
	ID    string
}

// decodeTopicObject checks the required "topic" of a dead-letter request.
func decodeTopicObject(obj jsonObject) (string, error) {
	topic, err := obj.stringField("topic")
	if err != nil {
		return "", err
	}
	return checkTopic("topic", topic)
}

func decodeDeadList(body []byte) (deadListRequest, error) {
	obj, err := parseObject(body, "topic", "offset", "limit")
	if err != nil {
		return deadListRequest{}, err
	}
	req := deadListRequest{Limit: defaultDeadListLimit}
	if req.Topic, err = decodeTopicObject(obj); err != nil {
		return deadListRequest{}, err
	}
	offset, err := obj.intField("offset", 0, maxDeadListOffset, "")
	if err != nil {
		return deadListRequest{}, err
	}
	req.Offset = int(offset)
	if obj.has("limit") {
		limit, err := obj.intField("limit", 1, delayqueue.MaxDeadPage, "")
		if err != nil {
			return deadListRequest{}, err
		}
		req.Limit = int(limit)
	}
	return req, nil
}

func decodeDeadKick(body []byte) (deadKickRequest, error) {
	obj, err := parseObject(body, "topic", "id", "count")
	if err != nil {
		return deadKickRequest{}, err
	}
	var req deadKickRequest
	if req.Topic, err = decodeTopicObject(obj); err != nil {
		return deadKickRequest{}, err
	}
	if err := obj.conflict("id", "count"); err != nil {
		return deadKickRequest{}, err
	}
	switch {
	case obj.has("id"):
		idReq, err := decodeIDObject(obj)
		if err != nil {
			return deadKickRequest{}, err
		}
		req.ID = idReq.ID
	case obj.has("count"):
		count, err := obj.intField("count", 1, delayqueue.MaxDeadPage, "the oldest are kicked")
		if err != nil {
			return deadKickRequest{}, err
		}
		req.Count = int(count)
	default:
		return deadKickRequest{}, errors.New("id or count is required: the dead letter to kick, or how many of the oldest")
	}
	return req, nil
}

func decodeDeadDelete(body []byte) (deadDeleteRequest, error) {
	obj, err := parseObject(body, "topic", "id", "all")
	if err != nil {
		return deadDeleteRequest{}, err
	}
	var req deadDeleteRequest
	if req.Topic, err = decodeTopicObject(obj); err != nil {
		return deadDeleteRequest{}, err
	}
	if err := obj.conflict("id", "all"); err != nil {
		return deadDeleteRequest{}, err
	}
	switch {
	case obj.has("id"):
		idReq, err := decodeIDObject(obj)
		if err != nil {
			return deadDeleteRequest{}, err
		}
		req.ID = idReq.ID
	case obj.has("all"):
		// "all": false would read as "delete nothing", or as a typo for
		// true; neither is worth guessing about.
		all, err := obj.boolField("all")
		if err != nil {
			return deadDeleteRequest{}, err
		}
		if !all {
			return deadDeleteRequest{}, errors.New(`all must be true (to delete every dead letter of the topic) or left out`)
		}
	default:
		return deadDeleteRequest{}, errors.New(`id or "all": true is required: the dead letter to delete, or all of the topic's`)
	}
	return req, nil
}

// deadList pages through a topic's dead letters, newest first.
func (h *handler) deadList(w http.ResponseWriter, r *http.Request) {
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	req, err := decodeDeadList(body)
	if err != nil {
		fail(w, r, err.Error())
		return
	}
	noteJob(r, req.Topic, "")
	jobs, total, err := h.queue.DeadList(r.Context(), req.Topic, req.Offset, req.Limit)
	if err != nil {
		h.failQueue(w, r, "dead list", err)
		return
	}
	page := wire.DeadPage{Total: total, Jobs: make([]wire.DeadJob, 0, len(jobs))}
	for _, job := range jobs {
		dead := wire.DeadJob{
			ID:          job.ID,
			Topic:       job.Topic,
			Body:        job.Body,
			Attempts:    job.Attempts,
			Reason:      job.DeadReason,
			DeadAt:      wire.UnixSeconds(job.DeadAt),
			DeadAtMS:    wire.UnixMillis(job.DeadAt),
			CreatedAt:   wire.UnixSeconds(job.CreatedAt),
			CreatedAtMS: wire.UnixMillis(job.CreatedAt),
		}
		if job.Callback != nil {
			call := newJobInfo(&job)
			dead.LastStatus, dead.LastError, dead.LastResponse = call.LastStatus, call.LastError, call.LastResponse
		}
		page.Jobs = append(page.Jobs, dead)
	}
	succeed(w, r, "ok", page)
}

// deadKick sends dead letters back to ready, with their attempts reset.
func (h *handler) deadKick(w http.ResponseWriter, r *http.Request) {
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	req, err := decodeDeadKick(body)
	if err != nil {
		fail(w, r, err.Error())
		return
	}
	noteJob(r, req.Topic, req.ID)
	kicked, err := h.queue.DeadKick(r.Context(), req.Topic, req.ID, req.Count)
	if err != nil {
		h.failQueue(w, r, "dead kick", err)
		return
	}
	if kicked == nil {
		kicked = []string{}
	}
	succeed(w, r, fmt.Sprintf("kicked %d", len(kicked)), wire.KickResult{Kicked: kicked})
}

// deadDelete deletes one dead letter of a topic, or all of them.
func (h *handler) deadDelete(w http.ResponseWriter, r *http.Request) {
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	req, err := decodeDeadDelete(body)
	if err != nil {
		fail(w, r, err.Error())
		return
	}
	noteJob(r, req.Topic, req.ID)
	deleted, err := h.queue.DeadDelete(r.Context(), req.Topic, req.ID)
	if err != nil {
		h.failQueue(w, r, "dead delete", err)
		return
	}
	succeed(w, r, "deleted", wire.DeleteResult{Deleted: deleted})
}
