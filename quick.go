package main

// Quick mode (docs/protocol.md §3.4): fs methods run on the connection's reader goroutine
// itself. A stat answered there costs no goroutine and no wake-up of another thread, which is
// most of its price. A file system can still block (a stalled network mount, a FIFO whose
// reader stalls), so a watch per connection hands reading over once the running work has
// outlasted inlineBudget: it asks conn.read's owner, the only one to start readers, for a
// replacement, and the old reader ends with its work.
//
// The watch is one timer per connection, armed while quick work keeps coming and asleep
// otherwise. A timer armed for each request would have the runtime wake another thread each
// time (a new timer is earlier than the poller's sleep), in the middle of the round trip.

import (
	"encoding/json"
	"sync/atomic"
	"time"
)

// inlineBudget is how long a quick later may hold up the reader.
const inlineBudget = time.Millisecond

// quickRun is one quick later running on the reader.
type quickRun struct {
	start time.Time
	state atomic.Int32 // quickRunning, then quickFinished (by the reader) or quickMoved (by the watch)
}

const (
	quickRunning = iota
	quickFinished
	quickMoved
)

// quickWatch watches the quick later running on a connection's reader, if any.
type quickWatch struct {
	run   atomic.Pointer[quickRun]
	armed atomic.Bool
	timer *time.Timer // made stopped with the connection (startQuickWatch)
}

// runQuick runs a quick later on the reader and answers it. If the watch finds it still
// running after inlineBudget, reading has moved to a new goroutine, and runQuick reports
// readMoved: its caller stops reading.
func (c *conn) runQuick(id json.RawMessage, d *deferred) readStep {
	r := &quickRun{start: time.Now()}
	c.quick.run.Store(r) // also orders the reader's last read before a takeover
	c.armQuickWatch()
	res, err := c.runDeferred(d)
	c.reply(id, res, err)
	c.quick.run.CompareAndSwap(r, nil)
	if r.state.CompareAndSwap(quickRunning, quickFinished) {
		return readNext
	}
	return readMoved
}

// startQuickWatch makes the watch's timer, stopped, before the connection's first read.
func (c *conn) startQuickWatch() {
	c.quick.timer = time.AfterFunc(time.Hour, c.checkQuick)
	c.quick.timer.Stop()
}

// armQuickWatch arms the watch's timer unless it is armed already.
func (c *conn) armQuickWatch() {
	if !c.quick.armed.Load() && c.quick.armed.CompareAndSwap(false, true) {
		c.quick.timer.Reset(inlineBudget)
	}
}

// checkQuick is the watch's timer. It moves reading away from a later that has run for
// inlineBudget, waits out the rest of the budget of a younger one, and otherwise lets the
// timer sleep until the next quick later arms it.
func (c *conn) checkQuick() {
	r := c.quick.run.Load()
	if r != nil && r.state.Load() == quickRunning {
		if left := inlineBudget - time.Since(r.start); left > 0 {
			c.quick.timer.Reset(left)
			return
		}
		// While r runs its reader has not ended reading, so conn.read is waiting: at most
		// one hand-over is ever pending, and the send never blocks. The later still holds
		// its message, so the next one is read into a buffer of its own.
		if r.state.CompareAndSwap(quickRunning, quickMoved) {
			c.handover <- struct{}{}
		}
	}
	c.quick.armed.Store(false)
	// A later that began after the load above may have found the timer still armed.
	if r2 := c.quick.run.Load(); r2 != nil && r2 != r && r2.state.Load() == quickRunning {
		c.armQuickWatch()
	}
}

// stopQuickWatch stops the timer once the connection's reading has ended.
func (c *conn) stopQuickWatch() {
	c.quick.timer.Stop()
}
