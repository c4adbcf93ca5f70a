package redisconn

import (
	"context"
	"time"

	"github.com/gomodule/redigo/redis"
)

// routedConn is the connection Client.Do hands to f in cluster mode. It
// watches the replies so that Do can tell whether f may be run again: only
// when every reply f received was a refusal given before running (a
// redirect, NOSCRIPT, FCALL's "Function not found", READONLY) did nothing
// happen on this node. After an ASK it also sends ASKING before each of f's
// commands, since ASKING admits one command only and f may need several
// (EVALSHA, then EVAL after NOSCRIPT; FCALL, FUNCTION LOAD, FCALL).
type routedConn struct {
	redis.Conn
	addr   string // the node's address, for redirects that name no host
	asking bool
	// pending counts f's commands sent with Send whose replies are not
	// read yet; in asking mode each follows an ASKING reply to skip.
	pending int

	// first is the first redirect-like refusal received (nil: none).
	first error
	// ran is set by any reply that is not a refusal given before running,
	// and by replies read in bulk by a Do after Sends, which cannot be
	// told apart.
	ran bool
}

var (
	_ redis.ConnWithTimeout = (*routedConn)(nil)
	_ redis.ConnWithContext = (*routedConn)(nil)
)

// retrySafe reports whether f may be run again: it received a refusal and
// nothing that ran.
func (c *routedConn) retrySafe() bool { return c.first != nil && !c.ran }

// note records what a reply says about f having had an effect.
func (c *routedConn) note(reply any, err error) (any, error) {
	switch {
	case err == nil:
		c.ran = true
	case IsFunctionMissingReply(err):
		// Like NOSCRIPT: f loads the library and calls again.
	case refusedUnrun(err):
		if c.first == nil && replyCode(err) != "NOSCRIPT" {
			c.first = err
		}
	default:
		// An error reply from a command that ran (a script failing
		// half-way) or was refused for its arguments, which is f's
		// business; or a failed connection, after which what was sent may
		// have run, so that even after another command's refusal in a
		// pipeline, none may run again.
		c.ran = true
	}
	return reply, err
}

// beforeDo prepares a Do: replies of earlier Sends are read in bulk by it.
func (c *routedConn) beforeDo() error {
	if c.pending > 0 {
		c.ran = true
		c.pending = 0
	}
	if c.asking {
		return c.Conn.Send("ASKING")
	}
	return nil
}

// skipAsking counts the reply about to be read, and in asking mode reads
// the ASKING reply in front of it.
func (c *routedConn) skipAsking(receive func() (any, error)) error {
	if c.pending == 0 {
		return nil
	}
	c.pending--
	if !c.asking {
		return nil
	}
	_, err := receive()
	return err
}

func (c *routedConn) Do(cmd string, args ...any) (any, error) {
	if cmd == "" {
		// Flush and read everything pending, as redigo's Do("") does.
		c.ran = c.ran || c.pending > 0
		c.pending = 0
		return c.Conn.Do(cmd, args...)
	}
	if err := c.beforeDo(); err != nil {
		return nil, err
	}
	if cmd == "FUNCTION" {
		// Loading the library (after FCALL found no function) changes no
		// data, and loading it again does no harm: f may still run again.
		return c.Conn.Do(cmd, args...)
	}
	return c.note(c.Conn.Do(cmd, args...))
}

func (c *routedConn) DoWithTimeout(timeout time.Duration, cmd string, args ...any) (any, error) {
	if err := c.beforeDo(); err != nil {
		return nil, err
	}
	return c.note(redis.DoWithTimeout(c.Conn, timeout, cmd, args...))
}

func (c *routedConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	if err := c.beforeDo(); err != nil {
		return nil, err
	}
	return c.note(redis.DoContext(c.Conn, ctx, cmd, args...))
}

func (c *routedConn) Send(cmd string, args ...any) error {
	if c.asking {
		if err := c.Conn.Send("ASKING"); err != nil {
			return err
		}
	}
	c.pending++
	return c.Conn.Send(cmd, args...)
}

func (c *routedConn) Receive() (any, error) {
	if err := c.skipAsking(c.Conn.Receive); err != nil {
		return nil, err
	}
	return c.note(c.Conn.Receive())
}

func (c *routedConn) ReceiveWithTimeout(timeout time.Duration) (any, error) {
	receive := func() (any, error) { return redis.ReceiveWithTimeout(c.Conn, timeout) }
	if err := c.skipAsking(receive); err != nil {
		return nil, err
	}
	return c.note(receive())
}

func (c *routedConn) ReceiveContext(ctx context.Context) (any, error) {
	receive := func() (any, error) { return redis.ReceiveContext(c.Conn, ctx) }
	if err := c.skipAsking(receive); err != nil {
		return nil, err
	}
	return c.note(receive())
}
