//go:build !unix

package http1

import "context"

// canWatch: without a way to wait for readability without reading, paths
// whose requests hold are left to net/http.
const canWatch = false

func (c *conn) watch(cancel context.CancelFunc) (stop func()) { return func() {} }
