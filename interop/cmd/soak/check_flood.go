package main

// Check "flood": a client whose socket is backed up (a `cat /dev/zero` process streams to it
// and it stops reading) pipelines N process/read requests for a process holding 1 MiB of
// retained output, each answer about 1.4 MB, without reading the answers. If the server
// answered every request it read, it would hold N such answers; it keeps reading requests only
// while its outgoing queue has room, so its memory stays bounded, and once the client reads
// again every answer arrives.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"
)

// Shape and bounds of the flood check.
const (
	floodRSSBound  = 200 << 20 // the server's peak memory, whatever N
	floodRetained  = 1 << 20   // output of the process every request reads whole
	floodSample    = 100 * time.Millisecond
	floodDrainWait = 3 * time.Minute
)

func checkFlood(ctx context.Context, cfg *config) *result {
	n := cfg.flood
	r := &result{name: fmt.Sprintf("reply flood of %d process/reads", n)}
	ctx, cancel := context.WithTimeout(ctx, cfg.floodHold+floodDrainWait)
	defer cancel()
	srv, err := startServer(ctx, cfg.bin)
	if err != nil {
		r.err = err
		return r
	}
	defer srv.stop()
	w := newWatcher(false)
	c, _, err := connect(ctx, srv.url, w.handle, "")
	if err != nil {
		r.err = err
		return r
	}
	defer c.close()
	mark := newMark("flood")

	// A process that leaves exactly floodRetained bytes of output behind.
	w.watch("mib")
	if _, err := c.call(ctx, "process/start", startParams("mib", []string{"head", "-c", fmt.Sprint(floodRetained), "/dev/zero"}, false, childEnv(mark))); err != nil {
		r.err = err
		return r
	}
	if err := w.waitClosed(ctx, "mib"); err != nil {
		r.err = err
		return r
	}
	retained, err := retainedBytes(ctx, c, "mib")
	if err != nil || retained != floodRetained {
		r.err = fmt.Errorf("retained output: %d bytes (want %d), %v", retained, floodRetained, err)
		return r
	}
	// The stream that backs the socket up. Its notifications are not watched, so the client
	// skips them without decoding.
	if _, err := c.call(ctx, "process/start", startParams("zero", []string{"cat", "/dev/zero"}, false, childEnv(mark))); err != nil {
		r.err = err
		return r
	}
	before, err := srv.usage()
	if err != nil {
		r.err = err
		return r
	}

	samples := newSampler(srv)
	release := c.holdReads()
	defer release()
	var taken atomic.Int64
	pending := make(chan (<-chan reply), n)
	writeErr := make(chan error, 1)
	go func() { // the pipelined requests; ends when all are sent or the connection fails
		defer close(pending)
		for range n {
			ch, err := c.send("process/read", map[string]any{"processId": "mib"})
			if err != nil {
				writeErr <- err
				return
			}
			taken.Add(1)
			pending <- ch
		}
		writeErr <- nil
	}()
	hold := time.NewTimer(cfg.floodHold)
	<-hold.C
	sentWhileHeld := taken.Load()
	release()
	replies := 0
	for ch := range pending {
		if _, err := c.wait(ctx, ch); err != nil {
			r.err = fmt.Errorf("reply %d: %w", replies+1, err)
			break
		}
		replies++
	}
	if r.err != nil {
		c.ws.Close() // unblocks a writer stuck on the full socket
	}
	if err := <-writeErr; err != nil && r.err == nil {
		r.err = fmt.Errorf("sending requests: %w", err)
	}
	peak := samples.stop()
	if _, err := c.call(ctx, "process/terminate", map[string]any{"processId": "zero"}); err != nil && r.err == nil {
		r.err = err
	}
	if !srv.alive() {
		r.err = errServerDied
	}
	r.add(
		info("rss before", float64(before.rss>>20), "MiB"),
		mib("rss peak", peak, floodRSSBound>>20),
		info("requests written while not reading", float64(sentWhileHeld), ""),
		atLeast("replies", replies, n),
	)
	return r
}

// retainedBytes is the output process/read returns for id, whole.
func retainedBytes(ctx context.Context, c *client, id string) (int, error) {
	res, err := c.call(ctx, "process/read", map[string]any{"processId": id})
	if err != nil {
		return 0, err
	}
	var rr struct {
		Chunks []readChunk `json:"chunks"`
	}
	if err := json.Unmarshal(res, &rr); err != nil {
		return 0, err
	}
	total := 0
	for _, ch := range rr.Chunks {
		total += len(ch.Chunk)
	}
	return total, nil
}

// sampler reads the server's memory every floodSample on a goroutine of its own, until stop.
type sampler struct {
	done chan struct{}
	peak chan int64
}

func newSampler(srv *server) *sampler {
	s := &sampler{done: make(chan struct{}), peak: make(chan int64, 1)}
	go func() {
		var peak int64
		t := time.NewTicker(floodSample)
		defer t.Stop()
		for {
			if u, err := srv.usage(); err == nil {
				peak = max(peak, u.rss)
			}
			select {
			case <-t.C:
			case <-s.done:
				s.peak <- peak
				return
			}
		}
	}()
	return s
}

// stop ends the sampling and returns the peak.
func (s *sampler) stop() int64 {
	close(s.done)
	return <-s.peak
}
