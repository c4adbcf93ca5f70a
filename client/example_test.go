package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/delay-queue/delay-queue/client"
)

// A complete consumer: close orders still unpaid when their timeout job
// comes due. Ctrl-C stops popping and lets the jobs in flight finish.
func ExampleWorker() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	w := &client.Worker{
		Client:      client.New("http://127.0.0.1:9277", client.WithToken(os.Getenv("DQ_AUTH_TOKEN"))),
		Topics:      []string{"order-timeout"},
		Concurrency: 8,
		Logger:      slog.Default(),
		Handler: func(ctx context.Context, job client.Job) error {
			// Returning nil finishes the job; an error (or a panic)
			// releases it for a later attempt.
			return closeOrderIfUnpaid(ctx, job.Body)
		},
	}
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

func closeOrderIfUnpaid(ctx context.Context, orderID string) error { return nil }

// Schedule a job: the order closes in 30 minutes unless it is paid (and the
// job deleted) first.
func ExampleClient_Push() {
	c := client.New("http://127.0.0.1:9277")
	_, err := c.Push(context.Background(), client.PushJob{
		Topic: "order-timeout",
		ID:    "order-1001",
		Delay: 30 * time.Minute,
		TTR:   30 * time.Second,
		Body:  "1001",
	})
	var apiErr *client.APIError
	switch {
	case errors.As(err, &apiErr):
		fmt.Println("the server refused the job:", apiErr.Message)
	case err != nil:
		fmt.Println("the server could not be reached:", err)
	}
}

// Push a job with a retry schedule: 8 deliveries at most, spaced by the
// schedule, then the dead letters. The consumer needs no re-push logic.
func ExampleClient_Push_retrySchedule() {
	c := client.New("http://127.0.0.1:9277")
	_, err := c.Push(context.Background(), client.PushJob{
		Topic: "notify",
		ID:    "notify-T1001",
		TTR:   30 * time.Second,
		Body:  `{"url":"https://merchant.example/notify","trade_no":"T1001"}`,
		Retry: []time.Duration{2 * time.Minute, 10 * time.Minute, 10 * time.Minute, time.Hour,
			2 * time.Hour, 6 * time.Hour, 15 * time.Hour},
	})
	if err != nil {
		log.Print(err)
	}
}

// Push a batch; when part of it was not stored (a Redis node down), push
// the jobs that failed again once Redis is back. Pushing the whole batch
// again would be safe too, but would restart the stored jobs' delays.
func ExampleClient_PushBatch() {
	c := client.New("http://127.0.0.1:9277")
	jobs := []client.PushJob{
		{Topic: "order-timeout", ID: "order-1001", Delay: 30 * time.Minute, TTR: 30 * time.Second, Body: "1001"},
		{Topic: "order-timeout", ID: "order-1002", Delay: 30 * time.Minute, TTR: 30 * time.Second, Body: "1002"},
	}
	_, err := c.PushBatch(context.Background(), jobs)
	var partial *client.PartialBatchError
	switch {
	case errors.As(err, &partial):
		var again []client.PushJob
		for _, r := range partial.Failed() {
			again = append(again, jobs[r.Index])
		}
		fmt.Printf("%d of %d jobs not stored (%s): push them again later\n", len(again), len(jobs), partial.Message)
	case client.InvalidJobs(err) != nil:
		for _, bad := range client.InvalidJobs(err) {
			fmt.Printf("job %d (%s): %s\n", bad.Index, bad.ID, bad.Message)
		}
	case err != nil:
		fmt.Println("not pushed:", err)
	}
}
