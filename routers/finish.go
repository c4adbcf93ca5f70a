package routers

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/wire"
)

// idRequest is the body of /get, and of /finish and /delete for one job.
type idRequest struct {
	ID string
}

// decodeID parses and validates a body holding a job id.
func decodeID(body []byte) (idRequest, error) {
	obj, err := parseObject(body, "id")
	if err != nil {
		return idRequest{}, err
	}
	return decodeIDObject(obj)
}

// idsRequest is the body of /finish and /delete: {"id"} or {"ids":[...]};
// /finish also takes {"id","attempt"}.
type idsRequest struct {
	ID  string   // set for {"id"}
	IDs []string // set for {"ids"}: distinct, in the order first given
	// Attempt (/finish with id only) is the delivery's receipt, 0 when
	// absent: the finish is then not checked.
	Attempt int
}

// decodeIDs parses and validates a body holding one job id or a list, and
// withAttempt (/finish) the attempt that may come with one id.
func decodeIDs(body []byte, withAttempt bool) (idsRequest, error) {
	fields := []string{"id", "ids"}
	if withAttempt {
		fields = append(fields, "attempt")
	}
	obj, err := parseObject(body, fields...)
	if err != nil {
		return idsRequest{}, err
	}
	if err := obj.conflict("id", "ids"); err != nil {
		return idsRequest{}, err
	}
	if !obj.has("ids") {
		idReq, err := decodeIDObject(obj)
		if err != nil {
			return idsRequest{}, err
		}
		attempt, err := obj.attemptField()
		return idsRequest{ID: idReq.ID, Attempt: attempt}, err
	}
	if obj.has("attempt") {
		// Refused rather than ignored: the finish would not be checked.
		return idsRequest{}, errors.New("attempt goes with id, not with ids: a batch finish is not checked against deliveries")
	}
	elements, err := obj.arrayField("ids", 1, delayqueue.MaxIDsPerCall, "ids")
	if err != nil {
		return idsRequest{}, err
	}
	req := idsRequest{IDs: make([]string, 0, len(elements))}
	seen := make(map[string]bool, len(elements))
	for i, raw := range elements {
		field := fmt.Sprintf("ids[%d]", i)
		id, err := stringValue(field, raw)
		if err != nil {
			return idsRequest{}, err
		}
		if id, err = checkID(field, id); err != nil {
			return idsRequest{}, err
		}
		// A repeat would be counted twice in "finished".
		if !seen[id] {
			seen[id] = true
			req.IDs = append(req.IDs, id)
		}
	}
	return req, nil
}

func decodeIDObject(obj jsonObject) (idRequest, error) {
	id, err := obj.stringField("id")
	if err != nil {
		return idRequest{}, err
	}
	if id, err = checkID("id", id); err != nil {
		return idRequest{}, err
	}
	return idRequest{ID: id}, nil
}

// readIDs reads and decodes the body of /finish or /delete, and notes the
// (first) job id for the log line. On failure it answers the request itself
// and returns false.
func (h *handler) readIDs(w http.ResponseWriter, r *http.Request, withAttempt bool) (idsRequest, bool) {
	body, ok := h.readBody(w, r)
	if !ok {
		return idsRequest{}, false
	}
	req, err := decodeIDs(body, withAttempt)
	if err != nil {
		fail(w, r, err.Error())
		return idsRequest{}, false
	}
	if req.IDs == nil {
		noteJob(r, "", req.ID)
	} else {
		noteJob(r, "", req.IDs[0])
	}
	return req, true
}

// finish marks delivered jobs done for good. An unknown id is a success, as
// in the original; a dead-lettered job is refused (delete removes it). With
// an attempt, a delivery that no longer holds the job is refused too.
func (h *handler) finish(w http.ResponseWriter, r *http.Request) {
	req, ok := h.readIDs(w, r, true)
	if !ok {
		return
	}
	if req.IDs == nil {
		if req.Attempt == 0 {
			if err := h.queue.Finish(r.Context(), req.ID); err != nil {
				h.failQueue(w, r, "finish", err)
				return
			}
		} else if state, err := h.queue.FinishDelivery(r.Context(), req.ID, req.Attempt); err != nil {
			h.failLeaseChange(w, r, "finish", err, state, req.Attempt)
			return
		}
		succeed(w, r, "finished", nil)
		return
	}

	statuses, err := h.queue.FinishBatch(r.Context(), req.IDs)
	if errors.Is(err, delayqueue.ErrPartial) && len(statuses) == len(req.IDs) {
		h.partlyRemoved(w, r, req.IDs, statuses, wire.StatusFinished, "finishing", err)
		return
	}
	if err != nil {
		h.failQueue(w, r, "finish", err)
		return
	}
	var dead []string
	finished := 0
	for i, s := range statuses {
		switch s {
		case delayqueue.RemoveDead:
			dead = append(dead, req.IDs[i])
		case delayqueue.Removed:
			finished++
		}
	}
	view := wire.FinishResult{Finished: finished, Dead: dead}
	if len(dead) > 0 {
		// The others are finished: data says which were refused.
		failWithData(w, r, areDeadLettered(len(dead)), view)
		return
	}
	view.Dead = []string{}
	succeed(w, r, "finished", view)
}

// delete removes jobs in any state, dead letters included. An unknown id is
// a success.
func (h *handler) delete(w http.ResponseWriter, r *http.Request) {
	req, ok := h.readIDs(w, r, false)
	if !ok {
		return
	}
	if req.IDs == nil {
		if err := h.queue.Delete(r.Context(), req.ID); err != nil {
			h.failQueue(w, r, "delete", err)
			return
		}
		succeed(w, r, "deleted", nil)
		return
	}

	statuses, err := h.queue.DeleteBatch(r.Context(), req.IDs)
	if errors.Is(err, delayqueue.ErrPartial) && len(statuses) == len(req.IDs) {
		h.partlyRemoved(w, r, req.IDs, statuses, wire.StatusDeleted, "deleting", err)
		return
	}
	if err != nil {
		h.failQueue(w, r, "delete", err)
		return
	}
	deleted := 0
	for _, s := range statuses {
		if s == delayqueue.Removed {
			deleted++
		}
	}
	succeed(w, r, "deleted", wire.DeleteResult{Deleted: deleted})
}

// partlyRemoved answers a /finish or /delete with ids of which some
// partitions failed: every id's status (done, which is StatusFinished or
// StatusDeleted and names the outcome in the message too, StatusUnknown,
// StateDead or StatusFailed).
func (h *handler) partlyRemoved(w http.ResponseWriter, r *http.Request, ids []string, statuses []delayqueue.RemoveStatus, done, doing string, err error) {
	h.logger.LogAttrs(r.Context(), slog.LevelWarn, "batch "+doing+" partly done", slog.String(logKeyErr, err.Error()))
	outcomes := make([]wire.BatchResult, len(ids))
	failed := 0
	reason, itemMessage := partFailure(err)
	for i, s := range statuses {
		outcomes[i] = wire.BatchResult{Index: i, ID: ids[i]}
		switch s {
		case delayqueue.Removed:
			outcomes[i].Status = done
		case delayqueue.RemoveDead:
			outcomes[i].Status = wire.StateDead
		case delayqueue.RemoveFailed:
			outcomes[i].Status, outcomes[i].Message = wire.StatusFailed, itemMessage
			failed++
		default:
			outcomes[i].Status = wire.StatusUnknown
		}
	}
	failWithData(w, r, fmt.Sprintf(msgPartlyDone, failed, len(ids), partVerb(err, done), reason, doing), outcomes)
}

// areDeadLettered is the message of a batch finish that met n dead jobs.
func areDeadLettered(n int) string {
	if n == 1 {
		return "1 job is dead-lettered"
	}
	return fmt.Sprintf("%d jobs are dead-lettered", n)
}
