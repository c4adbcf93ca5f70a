package main

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// processSockets is the local ends of a process' TCP sockets, read from
// /proc: on this machine a Redis CLIENT LIST line whose addr is one of
// them is a connection of that process.
type processSockets struct {
	local map[netip.AddrPort]bool
}

// has reports whether addr (a CLIENT LIST addr: "127.0.0.1:5000",
// "[::1]:5000") is the local end of one of the process' sockets.
func (p *processSockets) has(addr string) bool {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return false
	}
	return p.local[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())]
}

// readProcessSockets finds the sockets process pid holds (its fds linking
// to socket:[inode]) and their local addresses in its /proc net/tcp and
// net/tcp6 tables.
func readProcessSockets(pid int) (*processSockets, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	fds, err := os.ReadDir(filepath.Join(dir, "fd"))
	if err != nil {
		return nil, fmt.Errorf("server sockets: %w", err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(dir, "fd", fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if inode, ok := strings.CutPrefix(target, "socket:["); ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	p := &processSockets{local: map[netip.AddrPort]bool{}}
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(filepath.Join(dir, "net", table))
		if err != nil {
			return nil, fmt.Errorf("server sockets: %w", err)
		}
		err = parseProcNetTCP(f, inodes, p.local)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("server sockets: %s: %w", table, err)
		}
	}
	return p, nil
}

// parseProcNetTCP reads a /proc net/tcp or net/tcp6 table and adds to
// local the local address of every socket whose inode is in inodes. Lines
// look like
// "0: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000 0 0 12345 ...":
// addresses in hex, each 32-bit word in host (little-endian) order.
func parseProcNetTCP(r io.Reader, inodes map[string]bool, local map[netip.AddrPort]bool) error {
	scanner := bufio.NewScanner(r)
	scanner.Scan() // the header
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) < 10 || !inodes[fields[9]] {
			continue
		}
		ap, err := parseProcNetAddr(fields[1])
		if err != nil {
			return err
		}
		local[ap] = true
	}
	return scanner.Err()
}

// parseProcNetAddr decodes "0100007F:1F90" (127.0.0.1:8080) and its
// 32-hex-digit IPv6 form; IPv4-mapped IPv6 addresses come out as IPv4.
func parseProcNetAddr(s string) (netip.AddrPort, error) {
	hexIP, hexPort, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("malformed address %q", s)
	}
	raw, err := hex.DecodeString(hexIP)
	if err != nil || len(raw) != 4 && len(raw) != 16 {
		return netip.AddrPort{}, fmt.Errorf("malformed address %q", s)
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("malformed port in %q", s)
	}
	for word := 0; word < len(raw); word += 4 {
		raw[word], raw[word+1], raw[word+2], raw[word+3] = raw[word+3], raw[word+2], raw[word+1], raw[word]
	}
	addr, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), nil
}
