package redisconn

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// fakeCluster is a set of fake cluster nodes on loopback ports that answer
// CLUSTER SLOTS with one shared map and other commands as each node's
// handler says: enough to provoke every redirect at a chosen moment.
type fakeCluster struct {
	slots      atomic.Value // string: the RESP reply to CLUSTER SLOTS
	slotsAsked atomic.Int64
	// gate, when set, holds every CLUSTER SLOTS reply (the map as it was
	// when asked) until the test releases it.
	gate atomic.Pointer[fakeGate]
}

// fakeGate holds CLUSTER SLOTS replies: each one held signals arrived,
// then waits for a value on release (or its close).
type fakeGate struct {
	arrived chan struct{}
	release chan struct{}
}

// holdSlots makes the nodes hold their CLUSTER SLOTS replies from now on,
// until the test ends or releases them one by one.
func (fc *fakeCluster) holdSlots(t *testing.T) *fakeGate {
	g := &fakeGate{arrived: make(chan struct{}, 100), release: make(chan struct{})}
	fc.gate.Store(g)
	t.Cleanup(func() { close(g.release) })
	return g
}

// fakeRange is one range of a fake slot map.
type fakeRange struct {
	start, end int
	node       *fakeNode
}

// setSlots sets the map every node gives from now on.
func (fc *fakeCluster) setSlots(ranges ...fakeRange) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(ranges))
	for _, r := range ranges {
		host, port, _ := net.SplitHostPort(r.node.addr)
		fmt.Fprintf(&b, "*3\r\n:%d\r\n:%d\r\n*3\r\n%s:%s\r\n%s", r.start, r.end, respBulk(host), port, respBulk("id-"+port))
	}
	fc.slots.Store(b.String())
}

// fakeSession is one client connection's state on a fake node.
type fakeSession struct {
	asking bool // the previous command was ASKING
}

// fakeNode answers each command with what handle returns: a raw RESP
// reply, or "" to close the connection without a reply.
type fakeNode struct {
	addr   string
	l      net.Listener
	handle func(s *fakeSession, args []string) string

	mu       sync.Mutex
	commands []string // every command but CLUSTER SLOTS, args joined by spaces
	conns    map[net.Conn]bool
}

func (fc *fakeCluster) node(t *testing.T, handle func(s *fakeSession, args []string) string) *fakeNode {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &fakeNode{addr: l.Addr().String(), l: l, handle: handle, conns: map[net.Conn]bool{}}
	var conns sync.WaitGroup
	t.Cleanup(func() {
		n.stop()
		conns.Wait()
	})
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			n.mu.Lock()
			if n.conns == nil { // stopped meanwhile
				n.mu.Unlock()
				conn.Close()
				return
			}
			n.conns[conn] = true
			// Added under the lock: a stop that follows orders its Wait
			// after this Add.
			conns.Add(1)
			n.mu.Unlock()
			go func() {
				defer conns.Done()
				defer func() {
					n.mu.Lock()
					delete(n.conns, conn)
					n.mu.Unlock()
					conn.Close()
				}()
				fc.serve(n, conn)
			}()
		}
	}()
	return n
}

// stop closes the listener and every connection, like a dead node: new
// connections are refused.
func (n *fakeNode) stop() {
	n.l.Close()
	n.mu.Lock()
	defer n.mu.Unlock()
	for conn := range n.conns {
		conn.Close()
	}
	n.conns = nil
}

func (fc *fakeCluster) serve(n *fakeNode, conn net.Conn) {
	r := bufio.NewReader(conn)
	s := &fakeSession{}
	for {
		args, err := readArgs(r)
		if err != nil {
			return
		}
		var reply string
		switch strings.ToUpper(strings.Join(args, " ")) {
		case "CLUSTER SLOTS":
			fc.slotsAsked.Add(1)
			reply = fc.slots.Load().(string)
			if g := fc.gate.Load(); g != nil {
				g.arrived <- struct{}{}
				<-g.release
			}
		case "ASKING":
			n.record(args)
			s.asking = true
			reply = "+OK\r\n"
		default:
			n.record(args)
			reply = n.handle(s, args)
			s.asking = false
		}
		if reply == "" {
			return
		}
		if _, err := io.WriteString(conn, reply); err != nil {
			return
		}
	}
}

func (n *fakeNode) record(args []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.commands = append(n.commands, strings.Join(args, " "))
}

// openConns counts the client connections the node has open.
func (n *fakeNode) openConns() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.conns)
}

// received returns the commands the node got so far.
func (n *fakeNode) received() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.commands...)
}

// readArgs reads one command: a RESP array of bulk strings.
func readArgs(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil {
		return nil, err
	}
	args := make([]string, n)
	for i := range args {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil {
			return nil, err
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:size])
	}
	return args, nil
}

func respBulk(s string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(s), s) }
func respErr(s string) string  { return "-" + s + "\r\n" }

// countingObserver counts routing events; onRedirect, when set, runs in
// the goroutine that met the redirect, before the client acts on it, and
// onRefresh in the goroutine that fetched the map, when it counts it.
type countingObserver struct {
	mu         sync.Mutex
	redirects  map[string]int
	refreshes  map[bool]int
	onRedirect func(kind string)
	onRefresh  func(ok bool)
}

func newCountingObserver() *countingObserver {
	return &countingObserver{redirects: map[string]int{}, refreshes: map[bool]int{}}
}

func (o *countingObserver) Redirect(kind string) {
	o.mu.Lock()
	o.redirects[kind]++
	hook := o.onRedirect
	o.mu.Unlock()
	if hook != nil {
		hook(kind)
	}
}

func (o *countingObserver) MapRefresh(ok bool) {
	o.mu.Lock()
	o.refreshes[ok]++
	hook := o.onRefresh
	o.mu.Unlock()
	if hook != nil {
		hook(ok)
	}
}

func (o *countingObserver) redirected(kind string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.redirects[kind]
}

func (o *countingObserver) refreshed(ok bool) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.refreshes[ok]
}
