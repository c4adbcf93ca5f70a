// Command notify-schedule delivers payment notifications to a merchant's
// URL on the Alipay-style schedule: at once, then 2m, 10m, 10m, 1h, 2h, 6h
// and 15h later (8 attempts in all), and gives up after the last one.
//
// The schedule lives in the job, not in the consumer: the job is pushed
// with "retry": [120, 600, 600, 3600, 7200, 21600, 54000], and the worker's
// handler only says whether this attempt worked. A failed attempt is
// released and the server makes it due again after the schedule's next
// wait; after the 8th failure the job lands in the topic's dead letters
// (see `dqctl dead list notify`), not in an endless loop.
//
// To try it without waiting hours, shorten the schedule:
//
//	make run    # a server on 127.0.0.1:9277 with an in-memory Redis
//	go run ./examples/notify-schedule -retry 2,4,8 -fail 2
//
// Without -merchant it starts a demo merchant on a loopback port that fails
// the first -fail calls of each notification and then answers "success".
// Flags: -url (default $DQ_URL, or http://127.0.0.1:9277), -token (default
// $DQ_AUTH_TOKEN), -merchant URL, -retry (seconds, comma-separated),
// -notifications, -fail.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/delay-queue/delay-queue/client"
)

const topic = "notify"

// notification is the body of a job: where to post, and what.
type notification struct {
	URL     string          `json:"url"`
	Payload json.RawMessage `json:"payload"`
}

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(logger); err != nil {
		logger.Error("notify-schedule failed", "err", err)
		os.Exit(1)
	}
}

func run(logger *slog.Logger) error {
	url := flag.String("url", envOr("DQ_URL", "http://127.0.0.1:9277"), "delay-queue server URL")
	token := flag.String("token", os.Getenv("DQ_AUTH_TOKEN"), "auth token")
	merchant := flag.String("merchant", "", "merchant notification URL (default: start a demo merchant)")
	retryFlag := flag.String("retry", "120,600,600,3600,7200,21600,54000", "waits before each retry, in seconds")
	count := flag.Int("notifications", 2, "notifications to send")
	failFirst := flag.Int("fail", 2, "the demo merchant fails this many calls per notification")
	flag.Parse()

	retry, err := parseSeconds(*retryFlag)
	if err != nil {
		return fmt.Errorf("-retry: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if *merchant == "" {
		demoURL, closeMerchant, err := startDemoMerchant(logger, *failFirst)
		if err != nil {
			return err
		}
		defer closeMerchant()
		*merchant = demoURL
	}

	c := client.New(*url, client.WithToken(*token))
	for i := 1; i <= *count; i++ {
		tradeNo := fmt.Sprintf("T%d%02d", time.Now().Unix(), i)
		payload, _ := json.Marshal(map[string]string{"trade_no": tradeNo, "trade_status": "TRADE_SUCCESS"})
		body, _ := json.Marshal(notification{URL: *merchant, Payload: payload})
		_, err := c.Push(ctx, client.PushJob{
			Topic: topic,
			ID:    "notify-" + tradeNo,
			TTR:   30 * time.Second, // a merchant call never takes that long
			Body:  string(body),
			Retry: retry, // len(retry)+1 attempts, then the dead letters
		})
		if err != nil {
			return fmt.Errorf("push the notification of %s: %w", tradeNo, err)
		}
		logger.Info("notification scheduled", "trade_no", tradeNo, "attempts", len(retry)+1)
	}

	attempts := len(retry) + 1
	httpClient := &http.Client{Timeout: 10 * time.Second}
	worker := &client.Worker{
		Client:      c,
		Topics:      []string{topic},
		Concurrency: 8,
		Logger:      logger,
		Handler: func(ctx context.Context, job client.Job) error {
			var n notification
			if err := json.Unmarshal([]byte(job.Body), &n); err != nil {
				logger.Error("malformed notification, dropped", "job_id", job.ID, "err", err)
				return nil
			}
			err := notify(ctx, httpClient, n)
			if err != nil && job.Attempts >= attempts {
				logger.Warn("last attempt failed: the notification goes to the dead letters",
					"job_id", job.ID, "err", err)
			}
			return err
		},
	}
	logger.Info("sending notifications; Ctrl-C to stop", "url", *url, "merchant", *merchant)
	return worker.Run(ctx)
}

// notify posts the payload; the merchant acknowledges with the body
// "success", as Alipay's protocol asks. Anything else is a failed attempt.
func notify(ctx context.Context, hc *http.Client, n notification) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.URL, bytes.NewReader(n.Payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("call the merchant: %w", err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(answer)) != "success" {
		return fmt.Errorf("merchant answered HTTP %d %q", resp.StatusCode, answer)
	}
	return nil
}

// startDemoMerchant serves a merchant on a loopback port that fails the
// first failFirst calls of each trade, then acknowledges.
func startDemoMerchant(logger *slog.Logger, failFirst int) (string, func(), error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("start the demo merchant: %w", err)
	}
	var mu sync.Mutex
	calls := map[string]int{}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var payload struct {
			TradeNo string `json:"trade_no"`
		}
		_ = json.NewDecoder(r.Body).Decode(&payload)
		mu.Lock()
		calls[payload.TradeNo]++
		call := calls[payload.TradeNo]
		mu.Unlock()
		if call <= failFirst {
			logger.Info("demo merchant: failing", "trade_no", payload.TradeNo, "call", call)
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		logger.Info("demo merchant: acknowledged", "trade_no", payload.TradeNo, "call", call)
		_, _ = io.WriteString(w, "success")
	})}
	go func() { _ = srv.Serve(listener) }()
	return "http://" + listener.Addr().String() + "/notify", func() { _ = srv.Close() }, nil
}

// parseSeconds reads a comma-separated list of whole seconds.
func parseSeconds(list string) ([]time.Duration, error) {
	var waits []time.Duration
	for part := range strings.SplitSeq(list, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		s, err := strconv.Atoi(part)
		if err != nil || s < 0 {
			return nil, fmt.Errorf("%q is not a whole number of seconds", part)
		}
		waits = append(waits, time.Duration(s)*time.Second)
	}
	return waits, nil
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
