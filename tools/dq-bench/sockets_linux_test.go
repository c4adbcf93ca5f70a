package main

import (
	"net"
	"os"
	"testing"
)

// readProcessSockets finds a connection this process holds, by its local
// end, and not the peer's end.
func TestReadProcessSocketsOfThisProcess(t *testing.T) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := listener.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	conn, err := net.Dial("tcp", listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if peer := <-accepted; peer != nil {
		defer peer.Close()
	}
	sockets, err := readProcessSockets(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !sockets.has(conn.LocalAddr().String()) {
		t.Errorf("the dialed connection's end %s is not among the process' sockets", conn.LocalAddr())
	}
	conn.Close()
	sockets, err = readProcessSockets(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if sockets.has(conn.LocalAddr().String()) {
		t.Errorf("the closed connection's end %s is still among the process' sockets", conn.LocalAddr())
	}
}
