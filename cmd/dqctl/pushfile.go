package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/delay-queue/delay-queue/client"
)

// maxReportedErrors is how many failed lines the summary lists.
const maxReportedErrors = 10

// lineJob is a parsed job and the line it came from (from 1).
type lineJob struct {
	line int
	job  client.PushJob
}

// lineError is a line that was not pushed, and why.
type lineError struct {
	Line    int    `json:"line"`
	ID      string `json:"id,omitempty"`
	Message string `json:"message"`
}

// pushSummary is the outcome of a file push.
type pushSummary struct {
	Pushed int `json:"pushed"`
	Failed int `json:"failed"`
	// NotStored counts the failed lines of batches the server stored only
	// in part, or refused whole, for its state (Redis or part of it
	// unavailable): valid jobs that pushing the file again stores.
	NotStored int `json:"not_stored"`
	// Errors lists the first failed lines, in line order.
	Errors []lineError `json:"errors"`
}

// filePusher pushes the jobs of a JSON-lines file in batches.
type filePusher struct {
	client    *client.Client
	batchSize int
	summary   pushSummary
	failures  []lineError
	progress  *progress
}

// pushFile pushes every job of a JSON-lines file (path "-" for stdin):
// one /push object per line, blank lines skipped. A malformed or invalid
// line is reported with its number and does not stop the others.
func pushFile(ctx context.Context, a *app, path string, batchSize int) error {
	in := os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	total := -1 // unknown for a pipe
	if info, err := in.Stat(); err == nil && info.Mode().IsRegular() {
		if total, err = countJobLines(in); err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		if _, err := in.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
	}

	p := &filePusher{client: a.client, batchSize: batchSize}
	if isTerminal(a.stderr) {
		p.progress = newProgress(a.stderr, total, time.Now)
	}
	started := time.Now()
	lines, err := p.pushLines(ctx, bufio.NewReaderSize(in, 64<<10))
	p.progress.finish()
	if err != nil {
		// Say what was done before the interruption, then why it stopped.
		_ = p.printSummary(a, lines, time.Since(started))
		return fmt.Errorf("%s: stopped after line %d: %w", path, lines, err)
	}
	if err := p.printSummary(a, lines, time.Since(started)); err != nil {
		return err
	}
	if p.summary.Failed > 0 {
		return errReported
	}
	return nil
}

// pushLines reads the lines, pushes them in batches, and returns the
// number of the last line read.
func (p *filePusher) pushLines(ctx context.Context, r *bufio.Reader) (int, error) {
	var batch []lineJob
	ids := map[string]bool{} // ids in batch
	flush := func() error {
		if len(batch) > 0 {
			p.send(ctx, batch)
			batch, ids = batch[:0:0], map[string]bool{}
		}
		return ctx.Err()
	}
	line := 0
	for {
		raw, readErr := r.ReadBytes('\n')
		if len(raw) > 0 {
			line++
			if job, ok := p.parseLine(line, raw); ok {
				// A repeated id goes to the next batch, so it replaces the
				// earlier line as separate pushes would (a batch refuses
				// duplicates).
				id := strings.TrimSpace(job.ID)
				if ids[id] {
					if err := flush(); err != nil {
						return line, err
					}
				}
				ids[id] = true
				batch = append(batch, lineJob{line, job})
				if len(batch) >= p.batchSize {
					if err := flush(); err != nil {
						return line, err
					}
				}
			}
		}
		if errors.Is(readErr, io.EOF) {
			return line, flush()
		}
		if readErr != nil {
			return line, errors.Join(readErr, flush())
		}
	}
}

// parseLine decodes one line; a malformed one is recorded as failed.
func (p *filePusher) parseLine(line int, raw []byte) (client.PushJob, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return client.PushJob{}, false
	}
	var job client.PushJob
	if raw[0] != '{' {
		p.fail(lineJob{line: line}, "not a JSON object")
		return job, false
	}
	if err := json.Unmarshal(raw, &job); err != nil {
		p.fail(lineJob{line: line}, "malformed JSON: "+err.Error())
		return job, false
	}
	return job, true
}

// send pushes a batch. When the server rejects it, it lists the invalid
// jobs: those lines are recorded as failed and the others are sent again.
// A rejection without that list for the batch's size (413) is retried one
// job at a time, so that each failing line is found. A batch stored in
// part, or refused whole for the server's state (Redis unavailable), is
// not sent again, and the summary says that pushing the file again is safe.
func (p *filePusher) send(ctx context.Context, batch []lineJob) {
	jobs := make([]client.PushJob, len(batch))
	for i, lj := range batch {
		jobs[i] = lj.job
	}
	_, err := p.client.PushBatch(ctx, jobs)
	if err == nil {
		p.pushed(len(batch))
		return
	}
	var partial *client.PartialBatchError
	if errors.As(err, &partial) {
		p.partlyStored(batch, partial)
		return
	}
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) {
		// Transport trouble: the batch may or may not be stored.
		for _, lj := range batch {
			p.fail(lj, err.Error())
		}
		return
	}
	if apiErr.HTTPStatus == http.StatusOK && client.InvalidJobs(err) == nil {
		// Refused whole for the server's state (Redis unavailable or
		// full, the server starting or stopping): no line is at fault,
		// and one at a time would only ask again for each.
		for _, lj := range batch {
			p.fail(lj, apiErr.Message)
			p.summary.NotStored++
		}
		return
	}
	if invalid := client.InvalidJobs(err); len(invalid) > 0 {
		bad := map[int]string{}
		for _, ij := range invalid {
			if ij.Index >= 0 && ij.Index < len(batch) {
				bad[ij.Index] = ij.Message
			}
		}
		if len(bad) > 0 {
			var valid []lineJob
			for i, lj := range batch {
				if msg, ok := bad[i]; ok {
					p.fail(lj, msg)
				} else {
					valid = append(valid, lj)
				}
			}
			if len(valid) > 0 {
				p.send(ctx, valid)
			}
			return
		}
	}
	for _, lj := range batch {
		if _, err := p.client.Push(ctx, lj.job); err != nil {
			msg := err.Error()
			if errors.As(err, &apiErr) {
				msg = apiErr.Message
			}
			p.fail(lj, msg)
			continue
		}
		p.pushed(1)
	}
}

// partlyStored records the outcome of a batch the server stored only in
// part: every job has a status, and the failed ones a message. A job the
// answer leaves out (or names wrongly) is counted as failed, with the
// batch's message: nothing says it was stored.
func (p *filePusher) partlyStored(batch []lineJob, partial *client.PartialBatchError) {
	failed := make([]string, len(batch))
	for i := range failed {
		failed[i] = partial.Message
	}
	for _, r := range partial.Results {
		if r.Index < 0 || r.Index >= len(batch) || r.ID != strings.TrimSpace(batch[r.Index].job.ID) {
			continue
		}
		switch {
		case r.Status != client.BatchFailed:
			failed[r.Index] = ""
		case r.Message != "":
			failed[r.Index] = r.Message
		}
	}
	for i, msg := range failed {
		if msg == "" {
			p.pushed(1)
			continue
		}
		p.fail(batch[i], msg)
		p.summary.NotStored++
	}
}

func (p *filePusher) pushed(n int) {
	p.summary.Pushed += n
	p.progress.add(n)
}

func (p *filePusher) fail(lj lineJob, msg string) {
	p.summary.Failed++
	p.failures = append(p.failures, lineError{Line: lj.line, ID: lj.job.ID, Message: msg})
	p.progress.add(1)
}

// printSummary writes the outcome on stdout: pushed, failed, and the first
// failed lines in line order.
func (p *filePusher) printSummary(a *app, lines int, elapsed time.Duration) error {
	failures := p.failures
	// Lines fail out of order (a rejected batch is sorted out after the
	// malformed lines that followed it were read).
	sortLineErrors(failures)
	shown := failures[:min(len(failures), maxReportedErrors)]
	p.summary.Errors = append([]lineError{}, shown...)
	if a.json {
		return a.printJSON(p.summary)
	}
	fmt.Fprintf(a.stdout, "pushed %d, failed %d (%d lines in %s)\n",
		p.summary.Pushed, p.summary.Failed, lines, elapsed.Round(time.Millisecond))
	for _, le := range shown {
		if le.ID != "" {
			fmt.Fprintf(a.stdout, "line %d (id %s): %s\n", le.Line, le.ID, le.Message)
		} else {
			fmt.Fprintf(a.stdout, "line %d: %s\n", le.Line, le.Message)
		}
	}
	if more := len(failures) - len(shown); more > 0 {
		fmt.Fprintf(a.stdout, "... and %d more failed lines\n", more)
	}
	if n := p.summary.NotStored; n > 0 {
		fmt.Fprintf(a.stdout, "not stored (or not confirmed by Redis' replicas) because Redis, or part of it, was unavailable, out of memory or short of replicas: %d lines; pushing the same file again is safe "+
			"(jobs already stored are replaced, or left alone with if_absent)\n", n)
	}
	return nil
}

func sortLineErrors(errs []lineError) {
	slices.SortStableFunc(errs, func(a, b lineError) int { return cmp.Compare(a.Line, b.Line) })
}

// countJobLines counts the non-blank lines of r.
func countJobLines(r io.Reader) (int, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	count := 0
	for {
		raw, err := br.ReadSlice('\n')
		if len(bytes.TrimSpace(raw)) > 0 {
			count++
			// A line longer than the buffer comes in pieces: skip the rest.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
		}
		if errors.Is(err, io.EOF) {
			return count, nil
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return count, err
		}
	}
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}
