package main

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestOutgoingRequestsRouteAnswers: ids are integers from 1; each answer reaches the request
// it names, once; an id we never gave, or one given up on, is not ours.
func TestOutgoingRequestsRouteAnswers(t *testing.T) {
	var o outgoingRequests
	id1, a1, err := o.begin()
	if err != nil || id1 != 1 {
		t.Fatalf("first id %d, %v; want 1", id1, err)
	}
	id2, a2, _ := o.begin()
	if id2 != 2 {
		t.Fatalf("second id %d, want 2", id2)
	}
	if !o.deliver(json.RawMessage("2"), clientAnswer{result: json.RawMessage(`{"decision":{"type":"allow"}}`)}) {
		t.Fatal("the answer to 2 found no request")
	}
	if o.deliver(json.RawMessage("2"), clientAnswer{}) {
		t.Error("a second answer to 2 was taken")
	}
	for _, id := range []string{"3", `"1"`, "1.0", "-1"} {
		if o.deliver(json.RawMessage(id), clientAnswer{}) {
			t.Errorf("an answer to %s was taken", id)
		}
	}
	got, err := o.await(context.Background(), id2, a2)
	if err != nil || string(got.result) != `{"decision":{"type":"allow"}}` {
		t.Fatalf("await 2: %s %v", got.result, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if _, err := o.await(ctx, id1, a1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("await 1 without an answer: %v, want the deadline", err)
	}
	if o.deliver(json.RawMessage("1"), clientAnswer{}) {
		t.Error("an answer after its request gave up was taken")
	}
}

// TestOutgoingRequestsBoundAndClose: at most maxPendingClientRequests wait; the connection's
// end ends every wait with its error and refuses new requests.
func TestOutgoingRequestsBoundAndClose(t *testing.T) {
	var o outgoingRequests
	answers := make(map[int64]<-chan clientAnswer)
	for range maxPendingClientRequests {
		id, a, err := o.begin()
		if err != nil {
			t.Fatal(err)
		}
		answers[id] = a
	}
	if _, _, err := o.begin(); !errors.Is(err, errTooManyClientRequests) {
		t.Fatalf("request %d: %v, want errTooManyClientRequests", maxPendingClientRequests+1, err)
	}
	gone := errors.New("the connection ended")
	var wg sync.WaitGroup
	errs := make(chan error, len(answers))
	for id, a := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := o.await(context.Background(), id, a)
			errs <- err
		}()
	}
	o.close(gone)
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, gone) {
			t.Fatalf("a wait ended with %v, want the connection's end", err)
		}
	}
	if _, _, err := o.begin(); !errors.Is(err, gone) {
		t.Errorf("a request after the end: %v, want the connection's end", err)
	}
}

// TestOutgoingRequestsConcurrent: answers delivered while requests begin, wait and give up
// reach their own request only (run with -race).
func TestOutgoingRequestsConcurrent(t *testing.T) {
	var o outgoingRequests
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, a, err := o.begin()
			if err != nil {
				t.Error(err)
				return
			}
			go o.deliver(json.RawMessage(jsonInt(id)), clientAnswer{result: json.RawMessage(jsonInt(id))})
			got, err := o.await(context.Background(), id, a)
			if err != nil || string(got.result) != jsonInt(id) {
				t.Errorf("request %d got %s %v", id, got.result, err)
			}
		}()
	}
	wg.Wait()
}

func jsonInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
