package routers

import (
	"os"
	"testing"

	"github.com/delay-queue/delay-queue/internal/redistest"
)

// sharedCluster is the Redis Cluster the end-to-end tests' cluster
// variants share, started by the first of them.
var sharedCluster redistest.SharedCluster

func TestMain(m *testing.M) {
	code := m.Run()
	sharedCluster.Stop()
	os.Exit(code)
}
