package main

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseProcNetTCP(t *testing.T) {
	// Two sockets of the process (inodes 111 and 333) and one of another
	// process, from net/tcp and net/tcp6 tables.
	tcp := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		"   0: 0100007F:1F90 0100007F:18EB 01 00000000:00000000 00:00000000 00000000     0        0 111 1 0000000000000000 20 4 30 10 -1\n" +
		"   1: 0100007F:1F91 0100007F:18EB 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0000000000000000 20 4 30 10 -1\n"
	tcp6 := "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		"   0: 00000000000000000000000001000000:C350 00000000000000000000000001000000:18EB 01 00000000:00000000 00:00000000 00000000     0        0 333 1 0000000000000000 20 4 30 10 -1\n" +
		"   1: 0000000000000000FFFF00000100007F:C351 0000000000000000FFFF00000100007F:18EB 01 00000000:00000000 00:00000000 00000000     0        0 444 1 0000000000000000 20 4 30 10 -1\n"
	inodes := map[string]bool{"111": true, "333": true, "444": true}
	local := map[netip.AddrPort]bool{}
	for _, table := range []string{tcp, tcp6} {
		if err := parseProcNetTCP(strings.NewReader(table), inodes, local); err != nil {
			t.Fatal(err)
		}
	}
	p := &processSockets{local: local}
	for addr, want := range map[string]bool{
		"127.0.0.1:8080":           true,  // 111
		"127.0.0.1:8081":           false, // 222: another process'
		"[::1]:50000":              true,  // 333
		"127.0.0.1:50001":          true,  // 444, IPv4-mapped
		"[::ffff:127.0.0.1]:50001": true,
		"127.0.0.1:6379":           false, // a remote end
		"not an address":           false,
	} {
		if got := p.has(addr); got != want {
			t.Errorf("has(%q) = %v, want %v", addr, got, want)
		}
	}
	if err := parseProcNetTCP(strings.NewReader("header\n 0: 0100007F 0100007F:18EB 01 0 0 0 0 0 111\n"), inodes, local); err == nil {
		t.Error("a malformed address of a listed inode was not an error")
	}
}
