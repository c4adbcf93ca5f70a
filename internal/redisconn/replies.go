package redisconn

import (
	"errors"
	"net"
	"strconv"
	"strings"

	"github.com/gomodule/redigo/redis"
)

// The kinds of cluster redirect, as Observer.Redirect receives them and
// RedirectKind returns them.
const (
	// RedirectMoved: the slot is served by another primary for good
	// (resharding done, failover).
	RedirectMoved = "moved"
	// RedirectAsk: the slot is migrating and the key is not (or no longer)
	// on this node; ask the target once, after ASKING.
	RedirectAsk = "ask"
	// RedirectTryAgain: a multi-key command on a migrating slot whose keys
	// are split between the two nodes; retry after a pause.
	RedirectTryAgain = "tryagain"
	// RedirectClusterDown: the cluster cannot serve the slot now (no
	// primary for it, or the node lost its majority).
	RedirectClusterDown = "clusterdown"
)

// replyCode returns the first word of an error reply ("MOVED", "READONLY"),
// or "" when err is not a redis.Error.
func replyCode(err error) string {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return ""
	}
	code, _, _ := strings.Cut(string(reply), " ")
	return code
}

// IsUnblockedReply reports whether err is Redis' UNBLOCKED: a blocking
// command (BLPOP) ended because its server became a replica, as in a
// failover asked for with CLUSTER FAILOVER or Sentinel's switchover.
func IsUnblockedReply(err error) bool { return replyCode(err) == "UNBLOCKED" }

// RedirectKind tells the cluster replies that send a command elsewhere or
// later: RedirectMoved, RedirectAsk, RedirectTryAgain, RedirectClusterDown,
// or "" for any other error (nil included).
func RedirectKind(err error) string {
	switch replyCode(err) {
	case "MOVED":
		return RedirectMoved
	case "ASK":
		return RedirectAsk
	case "TRYAGAIN":
		return RedirectTryAgain
	case "CLUSTERDOWN":
		return RedirectClusterDown
	}
	return ""
}

// IsTransientReply reports whether err is an error reply meaning "Redis
// cannot serve this now" rather than a refusal of the command itself:
// loading its data, a replica since a failover (READONLY, MASTERDOWN),
// too few replicas, a long script running (BUSY), a blocked command
// unblocked by a role change (UNBLOCKED), or a cluster redirect that
// Client.Do could not follow in its attempts.
func IsTransientReply(err error) bool {
	switch replyCode(err) {
	case "LOADING", "READONLY", "MASTERDOWN", "NOREPLICAS", "BUSY", "UNBLOCKED",
		"TRYAGAIN", "CLUSTERDOWN", "MOVED", "ASK":
		return true
	}
	return false
}

// IsOutOfMemoryReply reports whether err is Redis refusing a write because
// its memory is full (maxmemory with the noeviction policy): an OOM reply,
// or, from a script on Redis 6, an ERR reply that carries the OOM of the
// command the script ran.
func IsOutOfMemoryReply(err error) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return false
	}
	return replyCode(err) == "OOM" || strings.Contains(string(reply), "-OOM ")
}

// refusedUnrun reports whether err is a reply that Redis gives before
// running a command, so the command had no effect: the redirects, NOSCRIPT
// (EVALSHA of an unknown script, which redigo's Script follows with EVAL),
// and the replica's refusals.
func refusedUnrun(err error) bool {
	switch replyCode(err) {
	case "MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "NOSCRIPT", "READONLY", "MASTERDOWN":
		return true
	}
	return false
}

// redirect is a parsed MOVED or ASK reply.
type redirect struct {
	kind string
	slot int
	addr string // host:port of the node to ask
}

// parseRedirect parses "MOVED <slot> <host>:<port>" and "ASK ...". An empty
// host (Redis 7 with an unknown endpoint) means the host of the node that
// answered, from.
func parseRedirect(err error, from string) (redirect, bool) {
	kind := RedirectKind(err)
	if kind != RedirectMoved && kind != RedirectAsk {
		return redirect{}, false
	}
	var reply redis.Error
	errors.As(err, &reply)
	fields := strings.Fields(string(reply))
	if len(fields) != 3 {
		return redirect{}, false
	}
	slot, err := strconv.Atoi(fields[1])
	if err != nil || slot < 0 || slot >= SlotCount {
		return redirect{}, false
	}
	// Redis writes ip:port without brackets, IPv6 included.
	sep := strings.LastIndexByte(fields[2], ':')
	if sep < 0 {
		return redirect{}, false
	}
	host, port := fields[2][:sep], fields[2][sep+1:]
	if host == "" {
		host, _, _ = net.SplitHostPort(from)
	}
	if _, err := strconv.Atoi(port); err != nil || host == "" {
		return redirect{}, false
	}
	return redirect{kind: kind, slot: slot, addr: net.JoinHostPort(host, port)}, true
}

// IsFunctionMissingReply reports whether err is FCALL's refusal of a
// function this Redis does not hold (its library was never loaded here,
// or was lost: a restart without persistence, FUNCTION FLUSH). Like
// NOSCRIPT, it comes before anything ran.
func IsFunctionMissingReply(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) && strings.HasPrefix(string(reply), "ERR Function not found")
}

// IsFunctionsRefusedReply reports whether err says this Redis will not run
// functions for us: it has none (Redis before 7, miniredis, some proxies),
// or the ACL user may not call or load them.
func IsFunctionsRefusedReply(err error) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return false
	}
	msg := string(reply)
	switch replyCode(err) {
	case "ERR":
		return strings.HasPrefix(msg, "ERR unknown command")
	case "NOPERM":
		return strings.Contains(msg, "'fcall'") || strings.Contains(msg, "'function")
	}
	return false
}
