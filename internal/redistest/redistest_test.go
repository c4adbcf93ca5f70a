package redistest

import "testing"

// FreePort's ports come from below the kernel's ephemeral range, where no
// listener on port 0 and no connection's source port can take them, and
// are free to listen on.
func TestFreePortIsFreeAndBelowTheEphemeralPorts(t *testing.T) {
	for range 20 {
		port := FreePort(t)
		if port < freePortsStart || port >= firstEphemeralPort {
			t.Fatalf("FreePort gave %d, outside %d-%d", port, freePortsStart, firstEphemeralPort-1)
		}
		if !portFree(port) {
			t.Fatalf("FreePort gave %d, which cannot be listened on", port)
		}
	}
}
