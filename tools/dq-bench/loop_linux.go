package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
)

// loopConn is one connection of the event loop.
type loopConn struct {
	fd      int
	step    loopStep
	in      []byte // bytes read and not yet parsed
	out     []byte // the request being written, reused
	pending []byte // the part of out the socket did not take yet
	index   int32  // in the loop's connections, the epoll data
	open    bool
	// writeWatched says the epoll set waits for the socket to take more.
	writeWatched bool
}

// runLoop runs one connection per step until every step has stopped, a
// step or a connection fails, or ctx ends.
func runLoop(ctx context.Context, baseURL string, steps []loopStep) error {
	target, err := resolveLoopTarget(baseURL)
	if err != nil {
		return err
	}
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("event loop: epoll_create1: %w", err)
	}
	defer syscall.Close(epfd)
	conns := make([]*loopConn, 0, len(steps))
	defer func() {
		for _, c := range conns {
			if c.open {
				syscall.Close(c.fd)
			}
		}
	}()
	for i, step := range steps {
		fd, err := dialLoop(target.addr)
		if err != nil {
			return err
		}
		c := &loopConn{fd: fd, step: step, in: make([]byte, 0, 16<<10), index: int32(i), open: true}
		conns = append(conns, c)
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(i)}
		if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
			return fmt.Errorf("event loop: epoll_ctl: %w", err)
		}
	}
	active := 0
	for _, c := range conns {
		more, err := c.advance(epfd, target.host, nil)
		if err != nil {
			return err
		}
		if more {
			active++
		}
	}
	events := make([]syscall.EpollEvent, len(conns))
	for active > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := syscall.EpollWait(epfd, events, 100)
		if err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			return fmt.Errorf("event loop: epoll_wait: %w", err)
		}
		for _, ev := range events[:n] {
			c := conns[ev.Fd]
			if !c.open {
				continue
			}
			if ev.Events&syscall.EPOLLOUT != 0 && len(c.pending) > 0 {
				if err := c.flush(epfd); err != nil {
					return err
				}
			}
			if ev.Events&(syscall.EPOLLIN|syscall.EPOLLERR|syscall.EPOLLHUP) == 0 {
				continue
			}
			more, err := c.receive(epfd, target.host)
			if err != nil {
				return err
			}
			if !more {
				active--
			}
		}
	}
	return nil
}

// dialLoop opens a TCP connection to addr for the event loop: connected
// while blocking (on the loopback it is at once), then non-blocking, with
// Nagle's delay off as Go's own connections have it.
func dialLoop(addr *net.TCPAddr) (int, error) {
	family, sa := syscall.AF_INET, syscall.Sockaddr(nil)
	if ip4 := addr.IP.To4(); ip4 != nil {
		sa4 := &syscall.SockaddrInet4{Port: addr.Port}
		copy(sa4.Addr[:], ip4)
		sa = sa4
	} else {
		family = syscall.AF_INET6
		sa6 := &syscall.SockaddrInet6{Port: addr.Port}
		copy(sa6.Addr[:], addr.IP.To16())
		sa = sa6
	}
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, syscall.IPPROTO_TCP)
	if err != nil {
		return 0, fmt.Errorf("event loop: socket: %w", err)
	}
	for {
		err = syscall.Connect(fd, sa)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err == nil {
		err = syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
	}
	if err == nil {
		err = syscall.SetNonblock(fd, true)
	}
	if err != nil {
		syscall.Close(fd)
		return 0, fmt.Errorf("event loop: connect to %s: %w", addr, err)
	}
	return fd, nil
}

// receive reads what the socket has and hands every complete answer to the
// step. more is false once the step stopped.
func (c *loopConn) receive(epfd int, host string) (more bool, err error) {
	if len(c.in) == cap(c.in) {
		c.in = append(c.in, make([]byte, cap(c.in))...)[:len(c.in)]
	}
	var n int
	for {
		n, err = syscall.Read(c.fd, c.in[len(c.in):cap(c.in)])
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	switch {
	case errors.Is(err, syscall.EAGAIN):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("event loop: read: %w", err)
	case n == 0:
		return false, errors.New("event loop: the server closed a connection while a request was outstanding")
	}
	c.in = c.in[:len(c.in)+n]
	for {
		answer, size, err := parseAnswer(c.in)
		if err != nil {
			return false, err
		}
		if size == 0 {
			return true, nil
		}
		more, err := c.advance(epfd, host, &answer)
		// The answer's bytes are dropped only after the step used them.
		rest := copy(c.in, c.in[size:])
		c.in = c.in[:rest]
		if err != nil || !more {
			return more, err
		}
	}
}

// advance gives the step the answer (nil at the start) and sends the
// request it returns, or closes the connection when it stops.
func (c *loopConn) advance(epfd int, host string, answer *loopAnswer) (more bool, err error) {
	req, more, err := c.step(answer)
	if err != nil {
		return false, err
	}
	if !more {
		syscall.Close(c.fd) // also leaves the epoll set
		c.open = false
		return false, nil
	}
	c.out = appendRequest(c.out[:0], host, req)
	c.pending = c.out
	return true, c.flush(epfd)
}

// flush writes the pending request; what the socket does not take now
// waits for EPOLLOUT.
func (c *loopConn) flush(epfd int) error {
	for len(c.pending) > 0 {
		n, err := syscall.Write(c.fd, c.pending)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
			return c.watchWrites(epfd, true)
		case err != nil:
			return fmt.Errorf("event loop: write: %w", err)
		}
		c.pending = c.pending[n:]
	}
	return c.watchWrites(epfd, false)
}

// watchWrites adds EPOLLOUT to the connection's events, or takes it away,
// when that changes.
func (c *loopConn) watchWrites(epfd int, watch bool) error {
	if watch == c.writeWatched {
		return nil
	}
	events := uint32(syscall.EPOLLIN)
	if watch {
		events |= syscall.EPOLLOUT
	}
	ev := syscall.EpollEvent{Events: events, Fd: c.index}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_MOD, c.fd, &ev); err != nil {
		return fmt.Errorf("event loop: epoll_ctl: %w", err)
	}
	c.writeWatched = watch
	return nil
}
