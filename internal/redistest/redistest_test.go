package redistest

import (
	"net"
	"strconv"
	"testing"
)

// FreePort's ports come from below the kernel's ephemeral range, where no
// listener on port 0 and no connection's source port can take them, and
// are free to listen on.
func TestFreePortIsFreeAndBelowTheEphemeralPorts(t *testing.T) {
	for range 20 {
		port := FreePort(t)
		if port < 10000 || port >= 32768 {
			t.Fatalf("FreePort gave %d, outside 10000-32767", port)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("listen on the port FreePort gave: %v", err)
		}
		l.Close()
	}
}
