package redisconn

import (
	"context"

	"github.com/gomodule/redigo/redis"
)

// The tests' own ways into a Client.

// doAt runs f on a pooled connection to the primary at addr, as listed by
// Primaries, for commands about that node (INFO). It follows no redirect.
// Without a cluster there is one primary, and addr is not looked at.
func (c *Client) doAt(ctx context.Context, addr string, f func(redis.Conn) error) error {
	if c.single != nil {
		return doOn(ctx, c.single, f)
	}
	conn, err := c.get(ctx, addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	return f(conn)
}

// isRedirect reports whether err is a MOVED, ASK, TRYAGAIN or CLUSTERDOWN
// reply: the command was refused, not run, because of where or when it was
// sent. A blocked BLPOP is also answered so when its slot moves.
func isRedirect(err error) bool { return RedirectKind(err) != "" }
