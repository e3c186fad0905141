package main

// Two ways to wait that the checks share: for n jobs run by a few workers, and for a state
// of the server that only /proc shows.

import (
	"context"
	"sync"
	"time"
)

// parallel runs job(0) … job(n-1) on workers goroutines and returns the first error; after
// one, the jobs not yet started are skipped. It returns when every started job has.
func parallel(ctx context.Context, n, workers int, job func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := job(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// pollInterval is how often poll looks at /proc.
const pollInterval = 50 * time.Millisecond

// poll calls done every pollInterval until it reports true, or until within has passed; it
// reports whether done did, and how long it took. It is for states the server announces to
// nobody (its descriptors back at baseline, its children gone, survivors of a kill dead):
// everything a check can await as an event, it awaits.
func poll(within time.Duration, done func() bool) (bool, time.Duration) {
	start := time.Now()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		if done() {
			return true, time.Since(start)
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return done(), time.Since(start)
		}
	}
}
