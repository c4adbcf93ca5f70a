// Command order-timeout closes orders that are still unpaid 30 minutes after
// they were placed, with a delay-queue server doing the waiting.
//
// When an order is placed, the shop pushes a job due in 30 minutes (delay
// 1800 s). If the order is paid first, the shop deletes the job. When the
// job comes due, a client.Worker checks the order and closes it if it is
// still unpaid. The check makes the handler idempotent: delivery is at least
// once, and a payment may race with the deletion.
//
// The orders live in memory here to keep the example self-contained; a real
// shop reads and updates its database in the same places. To try it:
//
//	make run    # a server on 127.0.0.1:9277 with an in-memory Redis
//	go run ./examples/order-timeout -orders 5 -close-after 10s
//
// Flags: -url (default $DQ_URL, or http://127.0.0.1:9277), -token (default
// $DQ_AUTH_TOKEN), -orders (demo orders to place), -close-after (default
// 30m), -concurrency.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/delay-queue/delay-queue/client"
)

// topic carries the order timeouts.
const topic = "order-timeout"

// Order states.
const (
	unpaid = "unpaid"
	paid   = "paid"
	closed = "closed"
)

// orderStore stands in for the shop's database.
type orderStore struct {
	mu     sync.Mutex
	status map[string]string
}

// closeIfUnpaid closes an unpaid order and reports whether it did.
func (s *orderStore) closeIfUnpaid(id string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	status, ok := s.status[id]
	if !ok {
		return false, fmt.Errorf("order %s not found", id)
	}
	if status != unpaid {
		return false, nil
	}
	s.status[id] = closed
	return true, nil
}

func (s *orderStore) set(id, status string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status[id] = status
}

// timeoutJob is the body of an order-timeout job.
type timeoutJob struct {
	OrderID string `json:"order_id"`
}

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(logger); err != nil {
		logger.Error("order-timeout failed", "err", err)
		os.Exit(1)
	}
}

func run(logger *slog.Logger) error {
	url := flag.String("url", envOr("DQ_URL", "http://127.0.0.1:9277"), "delay-queue server URL")
	token := flag.String("token", os.Getenv("DQ_AUTH_TOKEN"), "auth token")
	orders := flag.Int("orders", 3, "demo orders to place (every other one gets paid)")
	closeAfter := flag.Duration("close-after", 30*time.Minute, "how long an order may stay unpaid")
	concurrency := flag.Int("concurrency", 4, "orders checked at once")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := client.New(*url, client.WithToken(*token))
	store := &orderStore{status: map[string]string{}}

	// The shop side: place orders, and cancel the timeout of those paid.
	for i := 1; i <= *orders; i++ {
		orderID := fmt.Sprintf("%d-%d", time.Now().Unix(), i)
		if err := placeOrder(ctx, c, store, orderID, *closeAfter); err != nil {
			return err
		}
		logger.Info("order placed", "order", orderID, "closes_at", time.Now().Add(*closeAfter).Format(time.TimeOnly))
		if i%2 == 0 {
			if err := payOrder(ctx, c, store, orderID); err != nil {
				return err
			}
			logger.Info("order paid: timeout canceled", "order", orderID)
		}
	}

	// The consumer side: close what is still unpaid when its time comes.
	worker := &client.Worker{
		Client:      c,
		Topics:      []string{topic},
		Concurrency: *concurrency,
		Logger:      logger,
		Handler: func(ctx context.Context, job client.Job) error {
			var body timeoutJob
			if err := json.Unmarshal([]byte(job.Body), &body); err != nil {
				// A malformed job will not get better: finish it.
				logger.Error("malformed job, dropped", "job_id", job.ID, "err", err)
				return nil
			}
			closedNow, err := store.closeIfUnpaid(body.OrderID)
			if err != nil {
				return err // released, and retried after a backoff
			}
			if closedNow {
				logger.Info("order closed: unpaid after the timeout", "order", body.OrderID)
			} else {
				logger.Info("order already paid or closed", "order", body.OrderID)
			}
			return nil
		},
	}
	logger.Info("waiting for order timeouts; Ctrl-C to stop", "url", *url)
	return worker.Run(ctx)
}

// placeOrder stores an order and schedules its timeout. The job id is
// derived from the order so a retried placement replaces, not duplicates.
func placeOrder(ctx context.Context, c *client.Client, store *orderStore, orderID string, closeAfter time.Duration) error {
	store.set(orderID, unpaid)
	body, err := json.Marshal(timeoutJob{OrderID: orderID})
	if err != nil {
		return err
	}
	_, err = c.Push(ctx, client.PushJob{
		Topic: topic,
		ID:    "order-timeout-" + orderID,
		Delay: closeAfter,
		TTR:   30 * time.Second,
		Body:  string(body),
	})
	if err != nil {
		return fmt.Errorf("schedule the timeout of order %s: %w", orderID, err)
	}
	return nil
}

// payOrder marks an order paid and deletes its timeout job. Deleting is an
// optimisation: the handler's check alone would keep a paid order open.
func payOrder(ctx context.Context, c *client.Client, store *orderStore, orderID string) error {
	store.set(orderID, paid)
	if err := c.Delete(ctx, "order-timeout-"+orderID); err != nil {
		var apiErr *client.APIError
		if errors.As(err, &apiErr) {
			return fmt.Errorf("cancel the timeout of order %s: %w", orderID, err)
		}
		// The server was unreachable: the job stays, and the handler's
		// check will find the order paid.
		return nil
	}
	return nil
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
