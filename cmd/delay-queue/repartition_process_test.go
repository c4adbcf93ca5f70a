package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/redisconn"
	"github.com/delay-queue/delay-queue/internal/redistest"
	"github.com/delay-queue/delay-queue/wire"
)

// The offline change of the partition count, as operations.md tells it:
// with every server stopped, `delay-queue -c <conf> -repartition N`, then
// the servers started with bucket_size = N (or unset). Every job keeps its
// state and lands in its partition of the new count, on a single Redis and
// on a cluster.
func TestProcessRepartition(t *testing.T) {
	tests := []struct {
		name     string
		from, to int
		// start starts the test's Redis and returns a server's conf on
		// it, with bucketSize (0: unset, which a single Redis makes 3),
		// and HEXISTS on the node holding key.
		start func(t *testing.T) (conf func(bucketSize int) procConf, hexists func(key, field string) (bool, error))
	}{
		{
			name: "single redis", from: 3, to: 5,
			start: func(t *testing.T) (func(int) procConf, func(string, string) (bool, error)) {
				addr := redistest.Start(t).Addr
				conn := procRedisConn(t, addr, 1)
				t.Cleanup(func() { conn.Close() })
				return func(n int) procConf { return procConf{RedisAddr: addr, BucketSize: n} },
					func(key, field string) (bool, error) { return redis.Bool(conn.Do("HEXISTS", key, field)) }
			},
		},
		{
			name: "cluster", from: procClusterPartitions, to: 7,
			start: func(t *testing.T) (func(int) procConf, func(string, string) (bool, error)) {
				cluster := redistest.StartCluster(t, 3, 0)
				return func(n int) procConf { return procConf{ClusterAddrs: cluster.Addrs(), BucketSize: n} },
					func(key, field string) (bool, error) {
						owner := cluster.Node(cluster.SlotOwner(t, redisconn.Slot(key)))
						return redis.Bool(owner.Do("HEXISTS", key, field))
					}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			conf, hexists := tt.start(t)
			srv := newProcServerConf(t, "R", conf(tt.from))
			srv.Start()
			api := newProcClient()
			defer api.close()

			const topic = "repartitioned"
			var delayed, ready, reserved []string
			for i := range 20 {
				id := fmt.Sprintf("rp-delayed-%d", i)
				api.mustPush(t, srv, procPush{Topic: topic, ID: id, Delay: 3600, TTR: 60, Body: "body of " + id})
				delayed = append(delayed, id)
			}
			for i := range 20 {
				id := fmt.Sprintf("rp-ready-%d", i)
				api.mustPush(t, srv, procPush{Topic: topic, ID: id, TTR: 600, Body: "body of " + id})
				ready = append(ready, id)
			}
			for range 5 {
				job := api.mustPop(t, srv, topic, 5)
				if job == nil {
					t.Fatalf("/pop %s: data null with %d jobs ready", topic, len(ready))
				}
				reserved = append(reserved, job.ID)
			}
			srv.Stop(10 * time.Second)

			cmd := exec.Command(srv.bin, "-c", srv.confPath, "-repartition", fmt.Sprint(tt.to))
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), fmt.Sprintf("spread over %d partitions", tt.to)) {
				t.Fatalf("-repartition %d: %v\n%s", tt.to, err, out)
			}
			// Started with the old count, the server refuses, naming the
			// recorded one.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			old := exec.CommandContext(ctx, srv.bin, "-c", srv.confPath)
			if out, err := old.CombinedOutput(); err == nil || !strings.Contains(string(out), fmt.Sprintf("spread over %d partitions", tt.to)) ||
				!strings.Contains(string(out), fmt.Sprintf("run delay-queue -c %s -repartition", srv.confPath)) {
				t.Fatalf("started with the old bucket_size after -repartition: %v\n%s\nwant the refusal, its advice naming %s", err, out, srv.confPath)
			}

			// Then with the new count: given on a single Redis, and left
			// unset on the cluster, which adopts the recorded one.
			newConf := conf(tt.to)
			if newConf.ClusterAddrs != nil {
				newConf = conf(0)
			}
			newConf.BindAddress = srv.addr
			if err := os.WriteFile(srv.confPath, []byte(newConf.render()), 0o600); err != nil {
				t.Fatal(err)
			}
			srv.Start()
			stats := procClusterStats(t, api, srv, topic)
			if stats["delay"] != 20 || stats["ready"] != 15 || stats["reserved"] != 5 {
				t.Fatalf("/stats %s after -repartition = %v, want 20 delay, 15 ready, 5 reserved", topic, stats)
			}
			for _, id := range append(append(delayed, ready...), reserved...) {
				tag := procPartitionTag(procPartitionOf(id, tt.to), tt.to)
				if found, err := hexists(tag+"dq_jobs", id); err != nil || !found {
					t.Fatalf("job %s not in %sdq_jobs, its partition of %d (%v)", id, tag, tt.to, err)
				}
			}
			for _, id := range delayed {
				if job := procClusterGet(t, api, srv, id); job == nil || job.State != "delay" || job.Body != "body of "+id {
					t.Fatalf("/get %s after -repartition = %+v, want it delayed with its body", id, job)
				}
			}
			for _, id := range reserved {
				if job := procClusterGet(t, api, srv, id); job == nil || job.State != "reserved" || job.Attempts != 1 {
					t.Fatalf("/get %s after -repartition = %+v, want it reserved after 1 attempt", id, job)
				}
			}
			var popped []string
			for _, job := range procPopAll(t, api, srv, topic, 15, 20*time.Second) {
				popped = append(popped, job.ID)
			}
			if !procSameIDs(popped, procWithout(ready, reserved)) {
				t.Fatalf("popped after -repartition %v, want the ready jobs not reserved before", popped)
			}
			api.mustOK(t, srv, "/finish", wire.IDsRequest{IDs: append(popped, reserved...)})
			if stats := procClusterStats(t, api, srv, topic); stats["ready"] != 0 || stats["reserved"] != 0 || stats["delay"] != 20 {
				t.Fatalf("/stats %s after the finishes = %v, want only the 20 delayed jobs", topic, stats)
			}
		})
	}
}

// procWithout is ids less those in drop.
func procWithout(ids, drop []string) []string {
	var left []string
	for _, id := range ids {
		if !slices.Contains(drop, id) {
			left = append(left, id)
		}
	}
	return left
}
