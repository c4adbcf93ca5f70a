package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/delay-queue/delay-queue/internal/http1"
	"github.com/delay-queue/delay-queue/routers"
)

// runFloor measures the HTTP floor: the push phase's load (single-job
// /push requests on s.clients clients) sent to a server that does no queue
// work at all and answers a fixed envelope (dq-bench -serve-floor). It is
// what the server's HTTP stack, the load tool and the loopback cost on this
// machine, the ceiling of any single-job figure here.
func (b *bench) runFloor(ctx context.Context) error {
	if b.s.floorURL == "" {
		fmt.Fprintf(b.report.out, "%s n/a no -floor-url\n", phaseFloor)
		return nil
	}
	body := jobBody()
	makeJob := func(i int) pushJob {
		return pushJob{Topic: readyTopic, ID: jobID('f', i), TTR: jobTTR, Body: body}
	}
	var ok int
	var took time.Duration
	var err error
	if b.s.loop {
		ok, took, err = pushLoop(ctx, b.s.floorURL, b.s.clients, b.s.pushJobs, makeJob)
	} else {
		var client *apiClient
		if client, err = newAPIClient(b.s.httpClient, b.s.floorURL, b.s.clients); err != nil {
			return err
		}
		defer client.close()
		ok, took, err = pushWith(ctx, client, b.s.clients, b.s.pushJobs, makeJob)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", phaseFloor, err)
	}
	b.report.rate(phaseFloor, float64(ok)/took.Seconds(), "req/s", nil)
	return nil
}

// floorAnswer is the empty server's answer to every request.
const floorAnswer = `{"code":0,"message":"ok","data":null}` + "\n"

// serveFloor runs the http-floor phase's server on addr until ctx ends:
// the server's own HTTP stack (internal/http1, net/http for the rest) with
// a handler that reads each request's body and answers floorAnswer.
func serveFloor(ctx context.Context, addr string) error {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_, _ = io.WriteString(w, floorAnswer)
	})
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("serve the floor: %w", err)
	}
	srv := &http1.Server{
		Handler:           handler,
		Fallback:          &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second},
		Paths:             routers.JobPaths(),
		ReadHeaderTimeout: 10 * time.Second,
	}
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	defer stop()
	if err := srv.Serve(listener); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve the floor: %w", err)
	}
	return nil
}
