// Package webhook owns webhook delivery: the dispatcher that claims due
// callback jobs from the engine, calls their URLs (signed, with bounded
// concurrency, refusing non-public addresses unless allowed) and reports
// each outcome back, so the engine finishes the job, schedules a retry or
// dead-letters it. It knows nothing of the HTTP API.
package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/pause"
)

const (
	// defaultLeaseRenewAfter is how long a claimed job may wait for its
	// host's slot before its lease is renewed. It must stay below the
	// engine's lease margin (10 s over the call's timeout), so a call always
	// starts with at least its timeout left on the lease.
	defaultLeaseRenewAfter = 5 * time.Second
	// reportTimeout bounds the Redis calls that report an outcome; they run
	// even while shutting down.
	reportTimeout = 5 * time.Second
	// claimErrorBackoff is the pause after a failed claim.
	claimErrorBackoff = time.Second
)

// Dispatcher delivers callback jobs. Run it on every instance: the engine's
// claim shares the work, and no two dispatchers hold one job at once.
type Dispatcher struct {
	queue  *delayqueue.Queue
	opts   Options
	log    *slog.Logger
	caller *caller
	// slots holds one token per job this dispatcher holds (waiting for its
	// host or calling): the claim asks for as many jobs as there are free
	// slots.
	slots chan struct{}
	hosts *hostLimiter
	// leaseRenewAfter is defaultLeaseRenewAfter; tests shorten it.
	leaseRenewAfter time.Duration
}

// New builds a Dispatcher on the queue q, whose dispatch loops wake it
// when callback jobs become ready (Queue.WaitCallbacks).
func New(q *delayqueue.Queue, opts Options, logger *slog.Logger) (*Dispatcher, error) {
	if q == nil {
		return nil, errors.New("webhook: a queue is needed")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	policy, err := NewAddressPolicy(opts.Allow)
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Dispatcher{
		queue:  q,
		opts:   opts,
		log:    logger,
		caller: newCaller(policy, opts),
		slots:  make(chan struct{}, opts.Concurrency),
		hosts:  &hostLimiter{perHost: opts.PerHost, hosts: map[string]*hostSlots{}},

		leaseRenewAfter: defaultLeaseRenewAfter,
	}, nil
}

// Run claims and calls due callback jobs until ctx is done. Then it claims
// no more and starts no new call; calls in flight get Options.ShutdownGrace
// to finish, and those still running then are cut and given back, as are
// jobs that were waiting for their host. Run returns nil once every job it
// held is reported or given back.
func (d *Dispatcher) Run(ctx context.Context) error {
	// Calls outlive ctx by the grace period; stopCalls cuts them.
	callCtx, stopCalls := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCalls()
	var held sync.WaitGroup
	d.claimLoop(ctx, callCtx, &held)

	allDone := make(chan struct{})
	go func() {
		held.Wait()
		close(allDone)
	}()
	grace := time.NewTimer(d.opts.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-allDone:
	case <-grace.C:
		d.log.Info("webhook shutdown grace is over: cutting the calls still in flight")
		stopCalls()
		<-allDone
	}
	d.caller.transport.CloseIdleConnections()
	return nil
}

// claimLoop claims jobs while there are free slots, until ctx is done.
func (d *Dispatcher) claimLoop(ctx, callCtx context.Context, held *sync.WaitGroup) {
	// Nothing can be claimed while the engine brings an older release's
	// jobs over at start-up: wait for it, rather than fail a claim every
	// few seconds.
	select {
	case <-d.queue.Started():
	case <-ctx.Done():
		return
	}
	mayHaveMore := true // claim at once on start
	for {
		free := d.takeFreeSlots(ctx)
		if free == 0 {
			return
		}
		if !mayHaveMore {
			// Wake-ups only wake: after WakeTimeout the claim runs anyway.
			d.queue.WaitCallbacks(ctx, d.opts.WakeTimeout)
		}
		if ctx.Err() != nil {
			d.freeSlots(free)
			return
		}
		claimedAt := time.Now()
		// Not cancelled with ctx: jobs claimed in Redis must reach us, to be
		// given back, rather than wait for their lease to end.
		claimCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
		jobs, err := d.queue.ClaimCallbacks(claimCtx, free)
		cancel()
		d.freeSlots(free - len(jobs))
		for _, job := range jobs {
			held.Add(1)
			go func() {
				defer held.Done()
				defer d.freeSlots(1)
				d.deliver(ctx, callCtx, job, claimedAt)
			}()
		}
		mayHaveMore = err == nil && len(jobs) == free
		if err != nil {
			// An outage, or a layout changed under this server, is the
			// engine's to log, once; anything else is worth a warning.
			level := slog.LevelWarn
			if errors.Is(err, delayqueue.ErrUnavailable) || errors.Is(err, delayqueue.ErrLayout) {
				level = slog.LevelDebug
			}
			d.log.Log(ctx, level, "claiming callback jobs failed", "err", err)
			_ = pause.For(ctx, claimErrorBackoff)
		}
	}
}

// takeFreeSlots waits for one free slot, then takes every other free one.
// It returns 0 when ctx is done first.
func (d *Dispatcher) takeFreeSlots(ctx context.Context) int {
	select {
	case d.slots <- struct{}{}:
	case <-ctx.Done():
		return 0
	}
	n := 1
	for n < cap(d.slots) {
		select {
		case d.slots <- struct{}{}:
			n++
		default:
			return n
		}
	}
	return n
}

func (d *Dispatcher) freeSlots(n int) {
	for range n {
		<-d.slots
	}
}

// deliver waits for a slot of the job's host, makes the call and reports
// its outcome. claimedAt is when the lease began (at the latest).
func (d *Dispatcher) deliver(ctx, callCtx context.Context, job delayqueue.CallbackDelivery, claimedAt time.Time) {
	host := hostOf(job.Callback.URL)
	slots := d.hosts.join(host)
	defer d.hosts.leave(host, slots)
	leaseFrom, ok := d.waitForHost(ctx, job, slots, claimedAt)
	if !ok {
		return
	}
	defer func() { <-slots.calls }()
	if ctx.Err() != nil {
		d.giveBack(ctx, job, "dispatcher stopping before the call started")
		return
	}
	if time.Since(leaseFrom) >= d.leaseRenewAfter && !d.renewLease(ctx, job) {
		return
	}
	res := d.caller.call(callCtx, job)
	if res.cut {
		d.giveBack(ctx, job, res.errText)
		return
	}
	if d.opts.Metrics != nil {
		d.opts.Metrics.ObserveWebhookCall(res.class, res.latency)
	}
	d.report(ctx, job, res)
}

// waitForHost takes one of the host's call slots. The job keeps its
// dispatcher slot while it waits, and its lease is renewed every
// d.leaseRenewAfter, so waiting never lets a second dispatcher call it. It
// returns when the lease was last renewed, and false when the job was given
// back (shutdown) or lost (the lease could not be renewed).
func (d *Dispatcher) waitForHost(ctx context.Context, job delayqueue.CallbackDelivery, slots *hostSlots, leaseFrom time.Time) (time.Time, bool) {
	select {
	case slots.calls <- struct{}{}:
		return leaseFrom, true
	default:
	}
	renew := time.NewTimer(time.Until(leaseFrom.Add(d.leaseRenewAfter)))
	defer renew.Stop()
	for {
		select {
		case slots.calls <- struct{}{}:
			return leaseFrom, true
		case <-ctx.Done():
			d.giveBack(ctx, job, "dispatcher stopping before the call started")
			return leaseFrom, false
		case <-renew.C:
			renewedAt := time.Now()
			if !d.renewLease(ctx, job) {
				return leaseFrom, false
			}
			leaseFrom = renewedAt
			renew.Reset(d.leaseRenewAfter)
		}
	}
}

// renewLease extends the job's lease to its timeout plus the margin from
// now. On failure the job is left to its lease (it is called again after
// it, by whoever claims it) and false is returned.
func (d *Dispatcher) renewLease(ctx context.Context, job delayqueue.CallbackDelivery) bool {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	if _, _, err := d.queue.Touch(rctx, job.ID, job.Attempts); err != nil {
		d.log.Warn("could not renew the lease of a callback job waiting for its host; leaving it to its lease",
			"job_id", job.ID, "attempt", job.Attempts, "err", err)
		return false
	}
	return true
}

// report tells the engine how the call went; one warn line per failed call.
func (d *Dispatcher) report(ctx context.Context, job delayqueue.CallbackDelivery, res callResult) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	if res.succeeded() {
		err := d.queue.CallbackSucceeded(rctx, job)
		switch {
		case err == nil:
		case isMovedOn(err):
			// Deleted, re-pushed or its lease ended during the call: the
			// job as it is now is not this call's to finish.
			d.log.Info("callback answered 2xx after its job moved on; the job is left as it is",
				"job_id", job.ID, "topic", job.Topic, "attempt", job.Attempts, "err", err)
		default:
			d.log.Warn("callback answered 2xx but the job could not be finished; it will be called again after its lease",
				"job_id", job.ID, "topic", job.Topic, "attempt", job.Attempts, "err", err)
		}
		return
	}
	state, err := d.queue.CallbackFailed(rctx, job, res.status, res.errText, res.response)
	attrs := []any{"job_id", job.ID, "topic", job.Topic, "attempt", job.Attempts, "url", redactURL(job.Callback.URL),
		"result", res.class, "status", res.status, "err", res.errText, "latency_ms", res.latency.Milliseconds()}
	switch {
	case err == nil:
		attrs = append(attrs, "next", state)
	case isMovedOn(err):
		// Deleted, re-pushed or its lease ended meanwhile: nothing to record.
		attrs = append(attrs, "next", "job moved on", "report_err", err)
	default:
		attrs = append(attrs, "next", "left to its lease", "report_err", err)
	}
	d.log.Warn("callback failed", attrs...)
}

// giveBack returns a claimed job that was not called, or whose call was cut
// by shutdown, so that another dispatcher calls it at once. The attempt is
// not counted: the receiver did not fail it.
func (d *Dispatcher) giveBack(ctx context.Context, job delayqueue.CallbackDelivery, why string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	held, err := d.queue.UnclaimCallback(rctx, job)
	switch {
	case err == nil && held:
		d.log.Info("callback job given back", "job_id", job.ID, "attempt", job.Attempts, "why", why)
	case err == nil:
		// Finished, deleted, re-pushed or its lease ended meanwhile.
	default:
		d.log.Warn("could not give a callback job back; it will be called again after its lease",
			"job_id", job.ID, "attempt", job.Attempts, "why", why, "err", err)
	}
}

func isMovedOn(err error) bool {
	return errors.Is(err, delayqueue.ErrStaleDelivery) || errors.Is(err, delayqueue.ErrNotFound) ||
		errors.Is(err, delayqueue.ErrNotReserved) || errors.Is(err, delayqueue.ErrDead)
}

// hostOf is the destination host a URL's calls count against.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return strings.ToLower(u.Hostname())
}

// hostLimiter holds the call slots of each destination host that has jobs
// waiting or calling; a host's entry goes when its last job does.
type hostLimiter struct {
	perHost int
	mu      sync.Mutex
	hosts   map[string]*hostSlots
}

type hostSlots struct {
	calls chan struct{} // one token per call in flight
	jobs  int           // jobs waiting or calling; guarded by hostLimiter.mu
}

func (h *hostLimiter) join(host string) *hostSlots {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.hosts[host]
	if s == nil {
		s = &hostSlots{calls: make(chan struct{}, h.perHost)}
		h.hosts[host] = s
	}
	s.jobs++
	return s
}

func (h *hostLimiter) leave(host string, s *hostSlots) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s.jobs--
	if s.jobs == 0 {
		delete(h.hosts, host)
	}
}
