//go:build !linux

package main

import "context"

// runLoop needs epoll; elsewhere the phases run on goroutines.
func runLoop(context.Context, string, []loopStep) error {
	return errLoopUnsupported
}
