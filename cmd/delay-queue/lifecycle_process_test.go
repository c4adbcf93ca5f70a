package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/redistest"
)

// procTruthScript reads, in one atomic step, the state of every job and
// every per-topic counter of every partition, so that the counters can be
// compared with the truth while scanners keep changing states. It also
// lists the jobs missing from the index of their state, and the index
// entries no job explains. (It reads the record's head, described in
// delayqueue/scripts/lib.lua: state,attempts,due,pos,flags,#topic,
// #extra: then the topic; flags is odd when the job has a callback, and 4
// or more when its delay and ready entries end the position with "~": the
// record of such a job says delay until it is claimed, while the scanner
// may have moved its entry to ready.)
const procTruthScript = `
local truth, counters, problems = {}, {}, {}
for _, jobs in ipairs(redis.call('KEYS', '{*}dq_jobs')) do
  local tag = string.sub(jobs, 1, #jobs - #'dq_jobs')
  local entries = {}
  for _, index in ipairs({'ready', 'delayed', 'reserved', 'dead', 'hooks'}) do
    for _, m in ipairs(redis.call('ZRANGE', tag .. 'dq_' .. index, 0, -1)) do
      entries[index .. ' ' .. m] = true
    end
  end
  local h = redis.call('HGETALL', jobs)
  for i = 1, #h, 2 do
    local id, rec = h[i], h[i + 1]
    local s, x, flags, tl, at = string.match(rec, '^(%a+),%d+,%d+,([%d.]+),(%d+),(%d+),%d+:()')
    local topic = string.sub(rec, at, at + tonumber(tl) - 1)
    local sep = ','
    if tonumber(flags) >= 4 and (s == 'delay' or s == 'ready') then
      sep = '~,'
      if s == 'delay' and entries['ready ' .. topic .. ',' .. x .. sep .. id] then
        s = 'ready'
      end
    end
    truth[#truth + 1] = topic .. '/' .. s
    local index, m = ({ready = 'ready', delay = 'delayed', reserved = 'reserved', dead = 'dead'})[s], topic .. ',' .. x .. sep .. id
    if s == 'ready' and tonumber(flags) % 2 == 1 then
      index, m = 'hooks', x .. ',' .. id
    end
    if entries[index .. ' ' .. m] then
      entries[index .. ' ' .. m] = nil
    else
      problems[#problems + 1] = 'job ' .. id .. ' (' .. s .. ') not in ' .. tag .. index
    end
  end
  for e in pairs(entries) do
    problems[#problems + 1] = 'entry without its job: ' .. tag .. e
  end
  local c = redis.call('HGETALL', tag .. 'dq_counts')
  for i = 1, #c, 2 do
    local state, topic = string.match(c[i], '^(%a+),(.*)$')
    if state and state ~= 'dropped' then
      counters[#counters + 1] = topic .. '/' .. state .. '=' .. c[i + 1]
    end
  end
end
return {truth, counters, problems}
`

// TestProcessCountersMatchTruthAfterChaos runs the lifecycle (retry
// schedules, max_attempts, release, touch, finish, delete, re-push, dead
// letters, kicks) through two servers while one is killed with SIGKILL, then
// checks that the counters behind /stats equal the states of the jobs.
func TestProcessCountersMatchTruthAfterChaos(t *testing.T) {
	rs := redistest.Start(t)
	victim := startProcServer(t, "A", rs.Addr)
	survivor := startProcServer(t, "B", rs.Addr)
	servers := []*procServer{victim, survivor}
	api := newProcClient()
	defer api.close()

	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
	defer cancel()
	topics := []string{"chaos-a", "chaos-b"}
	var calls, failures atomic.Int64
	call := func(path string, body any) procEnvelope {
		s := servers[rand.IntN(len(servers))]
		env, _, err := api.call(s.baseURL, path, body, 5*time.Second)
		calls.Add(1)
		if err != nil {
			failures.Add(1) // the victim is down: expected
		}
		return env
	}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				id := fmt.Sprintf("c%d-%d", w, i%60) // ids repeat: re-pushes
				job := map[string]any{"topic": topics[i%2], "id": id, "ttr": 1, "body": "x",
					"delay_ms": rand.IntN(300)}
				switch i % 3 {
				case 0:
					job["retry"] = []int{0, 1}
				case 1:
					job["max_attempts"] = 2
				}
				call("/push", job)
			}
		}()
	}
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				env := call("/pop", map[string]any{"topic": "chaos-a,chaos-b", "timeout": 1, "count": 3})
				var jobs []procPopped
				if env.Code != 0 || procJSON(env.Data, &jobs) != nil {
					continue
				}
				for _, j := range jobs {
					switch rand.IntN(6) {
					case 0:
						call("/finish", map[string]any{"id": j.ID})
					case 1:
						call("/release", map[string]any{"id": j.ID, "attempt": j.Attempts})
					case 2:
						call("/touch", map[string]any{"id": j.ID, "attempt": j.Attempts})
					case 3:
						call("/delete", map[string]any{"id": j.ID})
					case 4:
						call("/dead/kick", map[string]any{"topic": j.Topic, "count": 2})
					default:
						// Never finished: the lease runs out.
					}
				}
			}
		}()
	}
	for k := 0; k < 2; k++ {
		select {
		case <-ctx.Done():
		case <-time.After(3 * time.Second):
		}
		victim.Kill()
		victim.Start()
	}
	wg.Wait()
	t.Logf("%d calls, %d failed while the victim was down", calls.Load(), failures.Load())

	c, err := redis.Dial("tcp", rs.Addr, redis.DialDatabase(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Twice: while leases still run out and delays come due, and after.
	for round := 0; round < 2; round++ {
		reply, err := redis.Values(c.Do("EVAL", procTruthScript, 0))
		if err != nil {
			t.Fatal(err)
		}
		states, _ := redis.Strings(reply[0], nil)
		counterLines, _ := redis.Strings(reply[1], nil)
		truth := map[string]int64{}
		for _, s := range states {
			truth[s]++
		}
		counters := map[string]int64{}
		for _, line := range counterLines {
			var key string
			var n int64
			for i := len(line) - 1; i >= 0; i-- {
				if line[i] == '=' {
					key = line[:i]
					fmt.Sscan(line[i+1:], &n)
					break
				}
			}
			if n != 0 {
				counters[key] += n
			}
		}
		if fmt.Sprint(truth) != fmt.Sprint(counters) {
			t.Fatalf("round %d: counters %v differ from the jobs' states %v", round, counters, truth)
		}
		if problems, _ := redis.Strings(reply[2], nil); len(problems) > 0 {
			t.Fatalf("round %d: the indexes differ from the jobs:\n%s", round, strings.Join(problems, "\n"))
		}
		if len(truth) == 0 {
			t.Fatal("no job left to count: the run did not exercise the counters")
		}
		t.Logf("round %d: counters match %d jobs: %v", round, len(states), truth)
		time.Sleep(1500 * time.Millisecond) // let leases expire and retries come due between the two snapshots
	}
	// And /stats serves those counters.
	env := api.mustOK(t, survivor, "/stats", map[string]any{})
	if env.dataIsNull() {
		t.Fatal("/stats returned no data")
	}
}

func procJSON(raw []byte, v any) error { return json.Unmarshal(raw, v) }
