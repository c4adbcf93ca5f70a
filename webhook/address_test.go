package webhook

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestCheckIPRefusesNonPublicAddresses(t *testing.T) {
	t.Parallel()
	policy, err := NewAddressPolicy(nil)
	if err != nil {
		t.Fatal(err)
	}
	refused := []string{
		"127.0.0.1", "127.255.255.254", // loopback
		"10.0.0.1", "10.255.255.255", // private
		"172.16.0.1", "172.31.255.255",
		"192.168.0.1", "192.168.255.255",
		"100.64.0.1", "100.100.100.200", "100.127.255.255", // CGNAT, Alibaba Cloud metadata
		"169.254.169.254", "169.254.0.1", // link-local, cloud metadata
		"0.0.0.0", "0.1.2.3", // unspecified
		"224.0.0.1", "239.255.255.250", // multicast
		"255.255.255.255", "240.0.0.1", // broadcast, reserved
		"::1", "::", // loopback, unspecified
		"fc00::1", "fd00:ec2::254", // unique local (AWS metadata over IPv6)
		"fe80::1", "fe80::1%eth0", // link-local, with a zone
		"ff02::1",                                                  // multicast
		"::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:172.16.0.1", // IPv4-mapped forms
		"::ffff:192.168.1.1", "::ffff:100.100.100.200", "::ffff:169.254.169.254",
		"::ffff:0.0.0.0", "::127.0.0.1", // IPv4-compatible (deprecated)
		"64:ff9b::a9fe:a9fe", "64:ff9b::7f00:1", // NAT64 of 169.254.169.254 and 127.0.0.1
		"2002:7f00:1::1", "2002:a9fe:a9fe::1", // 6to4 of 127.0.0.1 and 169.254.169.254
	}
	for _, s := range refused {
		t.Run("refuse "+s, func(t *testing.T) {
			err := policy.CheckIP(netip.MustParseAddr(s))
			if !errors.Is(err, ErrAddressRefused) {
				t.Fatalf("CheckIP(%s) = %v, want ErrAddressRefused", s, err)
			}
			if !strings.Contains(err.Error(), "callback_allow") {
				t.Errorf("the error should say how to permit the address: %v", err)
			}
		})
	}
	public := []string{
		"8.8.8.8", "1.1.1.1", "93.184.216.34",
		"172.15.255.255", "172.32.0.1", // just outside 172.16/12
		"100.63.255.255", "100.128.0.1", // just outside 100.64/10
		"192.167.255.255", "192.169.0.1", "169.253.255.255", "11.0.0.1", "126.255.255.255", "128.0.0.1",
		"2606:4700:4700::1111", "2001:4860:4860::8888",
		"::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1",
	}
	for _, s := range public {
		t.Run("allow "+s, func(t *testing.T) {
			if err := policy.CheckIP(netip.MustParseAddr(s)); err != nil {
				t.Fatalf("CheckIP(%s) = %v, want nil", s, err)
			}
		})
	}
}

func TestCheckIPHonoursAllowedAddresses(t *testing.T) {
	t.Parallel()
	policy, err := NewAddressPolicy([]string{"127.0.0.1", " 10.1.0.0/16 ", "::1", "fd00::/8", "169.254.169.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr    string
		allowed bool
	}{
		{"127.0.0.1", true},
		{"::ffff:127.0.0.1", true}, // the mapped form of an allowed address
		{"127.0.0.2", false},
		{"10.1.2.3", true},
		{"::ffff:10.1.2.3", true},
		{"10.2.0.1", false},
		{"::1", true},
		{"fd12::1", true},
		{"fc00::1", false},
		{"169.254.169.254", true},
		{"169.254.170.2", false},
		{"192.168.0.1", false},
		{"8.8.8.8", true},
	} {
		err := policy.CheckIP(netip.MustParseAddr(tc.addr))
		if got := err == nil; got != tc.allowed {
			t.Errorf("CheckIP(%s) = %v, want allowed=%v", tc.addr, err, tc.allowed)
		}
	}
}

func TestHostAllowed(t *testing.T) {
	t.Parallel()
	policy, err := NewAddressPolicy([]string{"Hooks.Internal.Example", ".corp.example", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host    string
		allowed bool
	}{
		{"hooks.internal.example", true},
		{"HOOKS.internal.example.", true},
		{"a.hooks.internal.example", false}, // a name is not a suffix
		{"internal.example", false},
		{"x.corp.example", true},
		{"a.b.corp.example", true},
		{"corp.example", false}, // a suffix matches names under it only
		{"evilcorp.example", false},
		{"corp.example.evil.test", false},
		{"localhost", true},
		{"127.0.0.1", false}, // addresses are matched by CheckIP, after resolution
	} {
		if got := policy.HostAllowed(tc.host); got != tc.allowed {
			t.Errorf("HostAllowed(%q) = %v, want %v", tc.host, got, tc.allowed)
		}
	}
}

func TestNewAddressPolicyRejectsBadEntries(t *testing.T) {
	t.Parallel()
	for _, entry := range []string{"127.0.0.1:8080", "*.example.com", "10.0.0.0/33", "http://x.example", "a b", ".", "bad/cidr", "x..y"} {
		if _, err := NewAddressPolicy([]string{entry}); err == nil || !strings.Contains(err.Error(), "callback_allow") {
			t.Errorf("NewAddressPolicy(%q) = %v, want an error naming callback_allow", entry, err)
		}
	}
	if _, err := NewAddressPolicy([]string{"", "  "}); err != nil {
		t.Errorf("empty entries should be ignored: %v", err)
	}
}

func TestDialControlChecksTheResolvedAddress(t *testing.T) {
	t.Parallel()
	policy, err := NewAddressPolicy([]string{"192.168.7.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		address string
		allowed bool
	}{
		{"127.0.0.1:80", false},
		{"[::1]:443", false},
		{"[::ffff:169.254.169.254]:80", false},
		{"[fe80::1%lo]:80", false},
		{"192.168.7.10:8080", true},
		{"93.184.216.34:443", true},
		{"[2606:4700:4700::1111]:443", true},
		{"example.com:80", false}, // never a name: the dialer has resolved it
		{"garbage", false},
	} {
		err := policy.dialControl("tcp", tc.address, nil)
		if got := err == nil; got != tc.allowed {
			t.Errorf("dialControl(%s) = %v, want allowed=%v", tc.address, err, tc.allowed)
		}
		if err != nil && !errors.Is(err, ErrAddressRefused) {
			t.Errorf("dialControl(%s) error %v does not wrap ErrAddressRefused", tc.address, err)
		}
	}
}
