package redisconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Sentinel discovery: every new connection asks the sentinels where the
// primary is, so connections opened after a failover reach the promoted
// replica without a restart. Connections opened before it fail (the old
// primary is gone) or get READONLY (it came back as a replica); either way
// the pool drops them, see primaryConn.

const (
	// primaryDialAttempts bounds how often one Dial asks the sentinels
	// again when the server they name cannot be reached or is not a
	// primary (a failover in progress).
	primaryDialAttempts = 3
	// primaryDialPause separates those attempts.
	primaryDialPause = 100 * time.Millisecond
	// maxSentinelTimeout caps the connect and reply time allowed to one
	// sentinel, so that a dead one does not hold a dial for long.
	maxSentinelTimeout = 2 * time.Second
)

// dialPrimary asks the sentinels for the primary, connects to it and checks
// that it is one.
func (o Options) dialPrimary() (redis.Conn, error) {
	var lastErr error
	for attempt := 0; attempt < primaryDialAttempts; attempt++ {
		if attempt > 0 {
			time.Sleep(primaryDialPause)
		}
		addr, err := o.discoverPrimary()
		if err != nil {
			// Every sentinel was asked already; asking again at once would
			// only repeat their timeouts.
			return nil, err
		}
		c, err := o.dialServer(addr)
		if err != nil {
			lastErr = err
			continue
		}
		if err := checkPrimary(c); err != nil {
			c.Close()
			lastErr = fmt.Errorf("redis at %s, named primary %q by the sentinels: %w", addr, o.MasterName, err)
			continue
		}
		return &primaryConn{Conn: c}, nil
	}
	return nil, lastErr
}

// discoverPrimary asks each sentinel in turn for the address of the primary
// named MasterName; the first that knows it answers.
func (o Options) discoverPrimary() (string, error) {
	problems := make([]string, 0, len(o.SentinelAddrs))
	for _, sentinel := range o.SentinelAddrs {
		addr, err := o.askSentinel(sentinel)
		if err == nil {
			return addr, nil
		}
		problems = append(problems, err.Error())
	}
	return "", fmt.Errorf("no sentinel gave the address of primary %q: %s", o.MasterName, strings.Join(problems, "; "))
}

// askSentinel asks one sentinel for the primary's address.
func (o Options) askSentinel(sentinelAddr string) (string, error) {
	timeout := o.ConnectTimeout
	if timeout <= 0 || timeout > maxSentinelTimeout {
		timeout = maxSentinelTimeout
	}
	c, err := redis.Dial("tcp", sentinelAddr,
		redis.DialConnectTimeout(timeout),
		redis.DialReadTimeout(timeout),
		redis.DialWriteTimeout(timeout),
		redis.DialUseTLS(o.TLS),
		redis.DialTLSConfig(o.TLSConfig),
	)
	if err != nil {
		return "", fmt.Errorf("sentinel %s: %w", sentinelAddr, err)
	}
	defer c.Close()
	hostPort, err := redis.Strings(c.Do("SENTINEL", "get-master-addr-by-name", o.MasterName))
	switch {
	case errors.Is(err, redis.ErrNil):
		return "", fmt.Errorf("sentinel %s does not monitor a primary named %q", sentinelAddr, o.MasterName)
	case err != nil:
		return "", fmt.Errorf("sentinel %s: %w", sentinelAddr, err)
	case len(hostPort) != 2:
		return "", fmt.Errorf("sentinel %s: unexpected reply %q to SENTINEL get-master-addr-by-name", sentinelAddr, hostPort)
	}
	return net.JoinHostPort(hostPort[0], hostPort[1]), nil
}

// checkPrimary returns nil when the server on c reports the master role.
func checkPrimary(c redis.Conn) error { return checkPrimaryContext(context.Background(), c) }

// checkPrimaryContext is checkPrimary within ctx.
func checkPrimaryContext(ctx context.Context, c redis.Conn) error {
	role, err := redis.Values(redis.DoContext(c, ctx, "ROLE"))
	if err != nil {
		return fmt.Errorf("ROLE: %w", err)
	}
	if len(role) == 0 {
		return errors.New("empty reply to ROLE")
	}
	name, err := redis.String(role[0], nil)
	if err != nil {
		return fmt.Errorf("ROLE: %w", err)
	}
	if name != "master" {
		return fmt.Errorf("it reports the role %q, not master", name)
	}
	return nil
}
