// Package wire defines the JSON bodies of the delay-queue HTTP API: the
// envelope every answer comes in, the body of every request, the data of
// every answer, and the words they carry (job states, batch statuses). The
// server (package routers) writes its answers with these types and the Go
// client (package client) reads them and writes its requests with them, so
// that each shape is written down once.
//
// The types are the bytes on the wire, not convenient Go values: times are
// unix seconds and, in the fields ending in _ms, unix milliseconds (0 when
// unknown); durations are whole seconds. Field order, omitempty and the
// choice between a nil and an empty slice are part of the contract (null
// and [] are different answers), and clients of the original server rely
// on them: change them only as a change of the API.
//
// The package imports nothing of the server, only the standard library
// (a test holds it to that), so that a program using the client does not
// pull in the server, and the engine (package delayqueue) can take its
// state names from here without depending on the HTTP layer.
package wire

// Envelope is the body of every answer: code 0 with the endpoint's data, or
// code 1 with a message saying what failed (and for some failures data
// saying which jobs). Data is null when an answer has none.
type Envelope[Data any] struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    Data   `json:"data"`
}

// Envelope codes, as in the original server.
const (
	CodeSuccess = 0
	CodeFailure = 1
)

// Job states, as /get, /release and /stats report them. They are also the
// states the engine stores (package delayqueue uses these constants, and
// its Lua scripts the same words), so a change here changes the Redis
// layout too.
const (
	StateDelay    = "delay"
	StateReady    = "ready"
	StateReserved = "reserved"
	StateDead     = "dead"
)

// Statuses of a job or an id in the answer to a batch: a batch push lists
// every job with created, replaced or exists; a batch done in part (some
// partitions unavailable, code 1) lists every job or id with one of these,
// or StateDead for a dead-lettered job /finish left alone, and failed for
// those not handled.
const (
	StatusCreated  = "created"
	StatusReplaced = "replaced"
	StatusExists   = "exists" // if_absent was set and the id existed: nothing changed
	StatusFailed   = "failed" // not handled: its part of Redis was unavailable
	StatusFinished = "finished"
	StatusDeleted  = "deleted"
	StatusUnknown  = "unknown" // no such job
)

// Prefixes of the messages of a code 1 answer refusing a state change
// because the delivery is no longer the caller's. The server may add detail
// after a prefix (the state found, the attempt sent); a client recognises a
// lost lease by the prefix alone.
const (
	MsgJobNotFound   = "job not found"
	MsgJobDead       = "job is dead-lettered"
	MsgNotReserved   = "job is not reserved"
	MsgStaleDelivery = "stale delivery"
)
