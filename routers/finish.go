package routers

import (
	"context"
	"net/http"
)

// idRequest is the body of /finish, /delete and /get.
type idRequest struct {
	ID string
}

// decodeID parses and validates a body holding a job id.
func decodeID(body []byte) (idRequest, error) {
	obj, err := parseObject(body, "id")
	if err != nil {
		return idRequest{}, err
	}
	id, err := obj.stringField("id")
	if err != nil {
		return idRequest{}, err
	}
	if id, err = checkID(id); err != nil {
		return idRequest{}, err
	}
	return idRequest{ID: id}, nil
}

// finish marks a delivered job done for good. An unknown id is a success,
// as in the original.
func (h *handler) finish(w http.ResponseWriter, r *http.Request) {
	h.removeJob(w, r, "finish", h.queue.Finish, "finished")
}

// delete removes a job in any state. An unknown id is a success.
func (h *handler) delete(w http.ResponseWriter, r *http.Request) {
	h.removeJob(w, r, "delete", h.queue.Delete, "deleted")
}

func (h *handler) removeJob(w http.ResponseWriter, r *http.Request, op string,
	remove func(ctx context.Context, id string) error, done string) {
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	req, err := decodeID(body)
	if err != nil {
		fail(w, r, err.Error())
		return
	}
	noteJob(r, "", req.ID)
	if err := remove(r.Context(), req.ID); err != nil {
		h.failQueue(w, r, op, err)
		return
	}
	succeed(w, r, done, nil)
}
