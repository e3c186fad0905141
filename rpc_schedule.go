package main

// The scheduler (docs/protocol.md §3.2–§3.4): how the work of each request runs once the
// dispatcher (rpc.go) has decoded and gated it on the connection's reader, in arrival
// order. The policy lives here, behind one small type owned by the connection: run modes,
// lanes, long polls, the tokens that bound deferred work, the reading of messages and the
// quick hand-over, and the one rule for giving a message's bytes back to its transport.
//
// A handler either answers at once or registers work (call.later), never both: the work is
// not a result. The scheduler then runs it as its mode says and answers the request with
// what it returns.
//
// Quick work (docs/protocol.md §3.4) runs on the reader itself: a stat answered there costs
// no goroutine and no wake-up of another thread, which is most of its price. A file system
// can still block (a stalled network mount, a FIFO whose reader stalls), so a watch per
// connection hands reading over once the running work has outlasted inlineBudget: it asks
// read's owner, the only one to start readers, for a replacement, and the old reader ends
// with its work. The watch is one timer per connection, armed while quick work keeps coming
// and asleep otherwise: a timer armed for each request would have the runtime wake another
// thread each time (a new timer is earlier than the poller's sleep), in the middle of the
// round trip.

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// maxDeferredPerConn bounds the work running off the reader at once for one connection. Past
// it the reader waits for one to finish, so a client that floods the server with slow
// requests is slowed down through its own socket instead of growing the server's memory.
const maxDeferredPerConn = 1024

// maxLongPollsPerConn bounds the process/read long polls waiting at once on one connection.
// They wait apart from that work, so pending long polls never hold up other
// requests; past the bound a long poll answers at once with what there is, as a read
// without waitMs does.
const maxLongPollsPerConn = 4096

// inlineBudget is how long quick work may hold up the reader.
const inlineBudget = time.Millisecond

// runMode is how a method's handler runs; each entry of the method table declares one.
// Params are decoded and the lifecycle gate applied on the reader in every mode, so
// malformed params and the gate are answered in arrival order.
type runMode uint8

const (
	// inline runs the handler on the reader: it must not block.
	inline runMode = iota
	// decides runs the handler on the reader, where it answers at once or registers the
	// rest of its work (call.later): fs path methods run quick when their sandbox leaves
	// them free and async in the sandbox worker otherwise (fsDo); process/read answers at
	// once when it can and long-polls otherwise; http/request reserves its requestId in
	// arrival order, then runs async. The choice depends on the request, so the table
	// cannot make it.
	decides
	// quick runs on the reader too, but may block (a stat, a small read): it gets a
	// goroutine of its own if it outlasts inlineBudget.
	quick
	// lane runs on a goroutine of its own, after earlier work with the same key: the
	// params' laneKey (fs handle methods: the handleId), or call.laterInLane's.
	lane
	// poll is a long poll: a goroutine of its own that takes no deferred-work slot but a
	// token of scheduler.polls; past maxLongPollsPerConn it answers at once with work.now.
	poll
	// async runs on a goroutine of its own, unordered.
	async
)

// laneKeyed is the params of a lane method: the key that orders its requests.
type laneKeyed interface{ laneKey() string }

// messageBorrower is params that keep pointing into the bytes of the message that carried
// them (fs/writeFile's lazyBase64 data, decoded late and in place): the work registered for
// such a request reads the message, which is released after it.
type messageBorrower interface{ borrowsMessage() }

// work is what a request still has to do once its handler has run on the reader: registered
// by the handler (call.later) or by the dispatcher for the table's quick, lane and async
// methods. It is never a result: the scheduler sends what run returns.
type work struct {
	mode runMode
	key  string // lane only
	// mustRun: the handler began what the work finishes (process/start reserved its process
	// and may own a shell snapshot's capture), so it runs even when the connection ends
	// before it is scheduled, unanswered; dropped, it would leave the process reserved and
	// the snapshot's key waiting for ever.
	mustRun bool
	now     result // poll only: the answer when no more long polls may wait
	run     runner
	// afterReply, when set by run, runs once the reply is queued: what must reach the
	// client after it, such as the body deltas of a streamed http/request.
	afterReply func()

	// Set by the scheduler (adopt, afterMessage).
	id    json.RawMessage // the request answered
	reads bool            // run reads the message's bytes (messageBorrower params)
	// msg is the message whose bytes run reads, or the zero message. The one rule of a
	// message's bytes: the scheduler gives them back after the last work that reads them,
	// whatever the mode — after the handler on the reader (scheduler.afterMessage), or,
	// when the registered work reads them too, after that work (scheduler.finish).
	msg   message
	token chan struct{} // the slots or polls token held, given back by finish
	tail  *laneTail     // lane only: the lane w is queued in
	done  chan struct{} // lane only: closed once w has answered, for the next in its lane
}

// runner is what work runs: a handler's typed work (typedWork) or, the one escape hatch, work
// that answers pre-encoded JSON itself (encodedWork). A func is stored in an interface as
// is: registering work costs no allocation for it.
type runner interface {
	run(ctx context.Context) (result, error)
}

// typedWork is work that answers an R, encoded by answer.
type typedWork[R any] func(ctx context.Context) (R, error)

func (f typedWork[R]) run(ctx context.Context) (result, error) { return encoded(f(ctx)) }

// encodedWork is work that answers encoded JSON: rawJSON, or framedJSON as the fs sandbox
// worker sends it back.
type encodedWork func(ctx context.Context) (result, error)

func (f encodedWork) run(ctx context.Context) (result, error) { return f(ctx) }

// later registers the rest of a deciding handler's work, to run as mode says (quick, poll,
// async) and answer the request with an R; the handler itself then answers nothing (its
// zero R), which the method table does not send. The returned work takes options
// (mustFinish, orNow). Only a handler running on the reader may call it.
func later[R any](c *call, mode runMode, fn func(ctx context.Context) (R, error)) *work {
	return c.sched.later(&work{mode: mode, run: typedWork[R](fn)})
}

// laterInLane registers work that runs after earlier work with the same lane key, and
// before later work with it (process/start waiting for its shell snapshot, and the requests
// about that process that follow it: docs/protocol.md §3.4).
func laterInLane[R any](c *call, key string, fn func(ctx context.Context) (R, error)) *work {
	return c.sched.later(&work{mode: lane, key: key, run: typedWork[R](fn)})
}

// laterEncoded is later for work that answers encoded JSON itself (encodedWork).
func (c *call) laterEncoded(mode runMode, fn func(ctx context.Context) (result, error)) *work {
	return c.sched.later(&work{mode: mode, run: encodedWork(fn)})
}

// mustFinish marks w as work that runs even if the connection ends first (work.mustRun).
func (w *work) mustFinish() *work {
	w.mustRun = true
	return w
}

// replyTurn waits until a woken long poll may build its answer: one at a time per
// connection, once the outgoing queue is within its bound. Up to maxLongPollsPerConn polls
// wake on one event, and an answer is as large as a process's retained output: built at
// once and queued without waiting, as the answers of requests are, they held the queue
// hundreds of times past its bound for a client that does not read. The caller releases
// the turn once its answer is queued (work.afterReply), or at once when it goes on
// waiting. It runs on the poll's goroutine.
func (s *scheduler) replyTurn(ctx context.Context) (release func(), err error) {
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	release = func() { <-s.turn }
	if s.room != nil {
		if err := s.room(ctx); err != nil {
			release()
			return nil, err
		}
	}
	return release, nil
}

// orNow sets a long poll's answer for when no more long polls may wait on the connection.
func (w *work) orNow(now result) *work {
	w.now = now
	return w
}

// laneTail is a lane: the work queued or running with its key.
type laneTail struct {
	last  chan struct{} // closed when the latest work of the lane has answered
	depth int           // work queued or running in the lane
}

// readStep is what the reader does after a message.
type readStep int

const (
	readNext  readStep = iota // read the next message
	readEnd                   // the connection ends
	readMoved                 // reading has moved to another goroutine (runQuick)
)

// scheduler runs the work of one connection's requests. Its fields are grouped by who owns
// them.
type scheduler struct {
	// Set by start before the first read; read only after.
	ctx   context.Context // the connection's: cancelled when it ends
	log   *logger
	reply func(id json.RawMessage, res result, err error) // conn.reply

	// The current reader's (one goroutine at a time reads; a hand-over passes the role on,
	// and the old reader only finishes its quick work, which registers nothing).
	pending *work // what the handler being run registered, taken by afterMessage

	// Reading: the reader, the quick watch's timer and read's owner.
	quick     quickWatch     // the quick work running on the reader, if any
	handover  chan struct{}  // the watch asks read's owner for a replacement reader
	readEnded chan struct{}  // closed by the last reader when reading ends
	readers   sync.WaitGroup // replacement readers, started by read's owner alone

	// Tokens: taken by the reader, given back by the work that holds them (finish).
	slots chan struct{} // one per running deferred work
	polls chan struct{} // one per waiting long poll
	// turn is held by the one woken long poll that builds and queues its answer
	// (replyTurn); room, set by the connection, waits until its outgoing queue is within its
	// bound (nil: no bound).
	turn    chan struct{}
	room    func(ctx context.Context) error
	running sync.WaitGroup // work on goroutines of its own

	// Guarded by mu: the reader joins lanes, work leaves them, handlers ask their depth.
	mu    sync.Mutex
	lanes map[string]*laneTail
}

// start readies s for a connection whose handlers are answered by reply; ctx ends with it.
func (s *scheduler) start(ctx context.Context, log *logger, reply func(json.RawMessage, result, error)) {
	s.ctx, s.log, s.reply = ctx, log, reply
	s.handover = make(chan struct{}, 1)
	s.readEnded = make(chan struct{})
	s.slots = make(chan struct{}, maxDeferredPerConn)
	s.polls = make(chan struct{}, maxLongPollsPerConn)
	s.turn = make(chan struct{}, 1)
	s.lanes = map[string]*laneTail{}
	s.quick.timer = time.AfterFunc(time.Hour, s.checkQuick)
	s.quick.timer.Stop()
}

// wait stops the quick watch and waits for every reader and every work to end. Reading
// must have ended.
func (s *scheduler) wait() {
	s.quick.timer.Stop()
	s.readers.Wait() // readers that handed over, finishing their quick work
	s.running.Wait()
}

// later registers w for the request whose handler is running (the reader's).
func (s *scheduler) later(w *work) *work {
	s.pending = w
	return w
}

// registered reports whether the handler running on the reader registered work.
func (s *scheduler) registered() bool { return s.pending != nil }

// adopt ties the work the handler registered, if any, to its request: id, which the work
// answers, and whether it reads the message's bytes (reads). A handler that failed after
// registering has its work dropped: the error is the answer. adopt reports whether work
// will answer the request.
func (s *scheduler) adopt(id json.RawMessage, reads bool, err error) bool {
	w := s.pending
	if w == nil {
		return false
	}
	if err != nil {
		s.pending = nil
		return false
	}
	w.id = append(json.RawMessage(nil), id...)
	w.reads = reads
	return true
}

// readingEnded is closed once the connection's reading has ended.
func (s *scheduler) readingEnded() <-chan struct{} { return s.readEnded }

// laneDepth is how much work with lane key is queued or running.
func (s *scheduler) laneDepth(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.lanes[key]; l != nil {
		return l.depth
	}
	return 0
}

// read runs the connection's first reader on the calling goroutine (a message is handled
// where the transport delivered it, without a hop to another thread) and, beside it, the one
// owner of replacement readers: each time the watch hands reading over from quick work that
// outlasted inlineBudget, the owner starts the next reader. When reading ends the owner
// calls ended at once: a handler still stalled on the first reader (a write to a FIFO nobody
// reads) must see the connection end, not hold its end back. read returns once its own
// reader is done; a reader that handed over may still be finishing its work
// (scheduler.readers).
func (c *conn) read(ended func()) {
	s := &c.sched
	owner := make(chan struct{})
	go func() {
		defer close(owner)
		for {
			select {
			case <-s.handover:
				s.readers.Add(1)
				go func() {
					defer s.readers.Done()
					c.readLoop()
				}()
			case <-s.readEnded:
				ended()
				return
			}
		}
	}()
	c.readLoop()
	<-owner
}

// readLoop reads and handles messages until the transport or the connection ends, then
// closes readEnded. It returns early, leaving readEnded open, when quick work outlasted
// inlineBudget and read started a replacement.
func (c *conn) readLoop() {
	for {
		if err := c.out.waitRoom(c.ctx, c.srv.cfg.stallTimeout); err != nil {
			if errors.Is(err, errSlowClient) {
				c.fail(err)
			}
			break
		}
		msg, err := c.t.next()
		if err != nil {
			break
		}
		step := c.sched.afterMessage(msg, c.handleMessage(msg))
		if step == readMoved {
			return
		}
		if step == readEnd {
			break
		}
	}
	close(c.sched.readEnded)
}

// afterMessage runs the work the message's handler registered, if any, and gives the
// message back once nothing reads it (work.msg): now, unless that work reads it too.
func (s *scheduler) afterMessage(msg message, step readStep) readStep {
	w := s.pending
	s.pending = nil
	if w == nil {
		msg.release()
		return step
	}
	if w.reads {
		w.msg = msg
	} else {
		msg.release()
	}
	return s.submit(w)
}

// submit takes a token for w (a slot, or a long poll's) and runs it as its mode says: quick
// work on the reader, lane work after earlier work with its key, the rest on a goroutine
// of its own.
func (s *scheduler) submit(w *work) readStep {
	if w.mode == poll {
		select {
		case s.polls <- struct{}{}:
			w.token = s.polls
		default:
			s.finish(w, w.now, nil) // past maxLongPollsPerConn: what there is, now
			return readNext
		}
	} else {
		select {
		case s.slots <- struct{}{}:
			w.token = s.slots
		case <-s.ctx.Done():
			if !w.mustRun {
				w.msg.release()
				return readNext
			}
			s.running.Add(1)
			go func() {
				defer s.running.Done()
				s.runSafely(w)
				w.msg.release() // unanswered: the connection is gone
			}()
			return readNext
		}
	}
	if w.mode == quick {
		return s.runQuick(w)
	}
	var prev chan struct{}
	if w.mode == lane {
		prev = s.joinLane(w)
	}
	s.running.Add(1)
	go func() {
		defer s.running.Done()
		if prev != nil {
			<-prev
		}
		res, err := s.runSafely(w)
		s.finish(w, res, err)
	}()
	return readNext
}

// finish answers w's request, then gives back what w holds (done). It is small enough to be
// inlined: the reply is written from the work's goroutine, whose stack starts small, and a
// frame less on the way to the transport spares it a copy of its stack per request.
func (s *scheduler) finish(w *work, res result, err error) {
	s.reply(w.id, res, err)
	s.done(w)
}

// done gives back what w holds: the message, its token, its place in its lane. The lane
// opens after the reply, so replies on one lane keep their order.
func (s *scheduler) done(w *work) {
	if w.afterReply != nil {
		w.afterReply()
	}
	w.msg.release()
	if w.tail != nil {
		s.leaveLane(w)
	}
	if w.token != nil {
		<-w.token
	}
}

// joinLane queues w behind the lane of its key and returns what it waits for, nil when the
// lane was empty.
func (s *scheduler) joinLane(w *work) (prev chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lanes[w.key]
	if l == nil {
		l = &laneTail{}
		s.lanes[w.key] = l
	}
	prev = l.last
	w.done = make(chan struct{})
	l.last = w.done
	l.depth++
	w.tail = l
	return prev
}

// leaveLane lets the next work of w's lane run, and forgets the lane once it is empty.
func (s *scheduler) leaveLane(w *work) {
	s.mu.Lock()
	if w.tail.depth--; w.tail.depth <= 0 && s.lanes[w.key] == w.tail {
		delete(s.lanes, w.key)
	}
	s.mu.Unlock()
	close(w.done)
}

// runSafely runs w, turning a panic into an internal error.
func (s *scheduler) runSafely(w *work) (res result, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("handler panic", "panic", r)
			res, err = nil, errInternal("internal error")
		}
	}()
	return w.run.run(s.ctx)
}

// quickRun is one quick work running on the reader.
type quickRun struct {
	start time.Time
	state atomic.Int32 // quickRunning, then quickFinished (by the reader) or quickMoved (by the watch)
}

const (
	quickRunning = iota
	quickFinished
	quickMoved
)

// quickWatch watches the quick work running on a connection's reader, if any.
type quickWatch struct {
	run   atomic.Pointer[quickRun]
	armed atomic.Bool
	timer *time.Timer // made stopped by start
}

// runQuick runs quick work on the reader and answers it. If the watch finds it still
// running after inlineBudget, reading has moved to a new goroutine, and runQuick reports
// readMoved: its caller stops reading.
func (s *scheduler) runQuick(w *work) readStep {
	r := &quickRun{start: time.Now()}
	s.quick.run.Store(r) // also orders the reader's last read before a takeover
	s.armQuickWatch()
	res, err := s.runSafely(w)
	s.finish(w, res, err)
	s.quick.run.CompareAndSwap(r, nil)
	if r.state.CompareAndSwap(quickRunning, quickFinished) {
		return readNext
	}
	return readMoved
}

// armQuickWatch arms the watch's timer unless it is armed already.
func (s *scheduler) armQuickWatch() {
	if !s.quick.armed.Load() && s.quick.armed.CompareAndSwap(false, true) {
		s.quick.timer.Reset(inlineBudget)
	}
}

// checkQuick is the watch's timer. It moves reading away from quick work that has run for
// inlineBudget, waits out the rest of the budget of a younger one, and otherwise lets the
// timer sleep until the next quick work arms it.
func (s *scheduler) checkQuick() {
	r := s.quick.run.Load()
	if r != nil && r.state.Load() == quickRunning {
		if left := inlineBudget - time.Since(r.start); left > 0 {
			s.quick.timer.Reset(left)
			return
		}
		// While r runs its reader has not ended reading, so read's owner is waiting: at
		// most one hand-over is ever pending, and the send never blocks. A message the
		// work still reads stays with it, and the next one is read into a buffer of its own.
		if r.state.CompareAndSwap(quickRunning, quickMoved) {
			s.handover <- struct{}{}
		}
	}
	s.quick.armed.Store(false)
	// Work that began after the load above may have found the timer still armed.
	if r2 := s.quick.run.Load(); r2 != nil && r2 != r && r2.state.Load() == quickRunning {
		s.armQuickWatch()
	}
}
