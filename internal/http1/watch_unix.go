//go:build unix

package http1

import (
	"context"
	"errors"
	"syscall"
	"time"
)

// canWatch: this system can wait for a connection to become readable
// without reading it.
const canWatch = true

// watch cancels a request's context when its client closes the
// connection or resets it, until the returned stop is called. It waits
// for the socket to become readable and peeks (MSG_PEEK), so no byte of a
// pipelined request is taken from the connection's reader: data means the
// client is alive and the watch ends; end of file or an error means it
// left.
func (c *conn) watch(cancel context.CancelFunc) (stop func()) {
	sc, ok := c.rwc.(syscall.Conn)
	if !ok {
		return func() {}
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var b [1]byte
		_ = raw.Read(func(fd uintptr) bool {
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
			if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) {
				return false // nothing yet: wait until readable
			}
			if n == 0 || err != nil {
				cancel()
			}
			return true
		})
	}()
	return func() {
		// A deadline in the past ends the wait; the next request's read
		// sets its own deadline.
		_ = c.rwc.SetReadDeadline(time.Unix(1, 0))
		<-done
	}
}
