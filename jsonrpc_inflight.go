package main

import (
	"context"
	"encoding/json"
	"sync"
)

// inflight is one session's table of long-running requests: each runs in its
// own goroutine so that the session keeps reading and answering other
// requests meanwhile, and its answer may come out of order. A client's
// notifications/cancelled ends one (cancel), and after that nothing more is
// written for it: 2026-07-28 says a server MUST NOT send further messages
// for a cancelled request, and older revisions say it SHOULD NOT answer.
// A handler runs through start; it reports progress with r.progress and
// stops when r.done() is closed.
type inflight struct {
	out messageWriter

	mu   sync.Mutex
	reqs map[string]*inflightRequest // by the request id's raw JSON
	wg   sync.WaitGroup
}

// inflightRequest is one running request, handed to its work function.
// Its ctx ends when the client cancels it or the session closes.
type inflightRequest struct {
	id, progressToken json.RawMessage // progressToken is nil when the request carried none
	out               messageWriter
	ctx               context.Context
	cancel            context.CancelFunc

	// mu orders every write for this request against cancellation, so a
	// cancelled request is never written to after cancel returns.
	mu        sync.Mutex
	cancelled bool // by the client: suppress everything from now on
}

// inflightWork computes a long-running request's answer, never a nil
// result without an error. It should return soon after r.ctx is done; what
// it returns then is written only when the session is closing, not when
// the client cancelled.
type inflightWork func(r *inflightRequest) (result any, err *rpcError)

// errDuplicateID answers a request whose id is still in flight: JSON-RPC
// ids must be unique among a sender's outstanding requests, and a second one
// would make the first unreachable by notifications/cancelled.
var errDuplicateID = &rpcError{-32600, "Invalid Request: request id is already in use"}

func newInflight(out messageWriter) *inflight {
	return &inflight{out: out, reqs: map[string]*inflightRequest{}}
}

// start runs work for the request id in its own goroutine and writes its
// answer when it returns. progressToken is params._meta.progressToken's raw
// JSON, or nil. It returns errDuplicateID, and runs nothing, when id is
// already in flight.
func (t *inflight) start(id, progressToken json.RawMessage, work inflightWork) *rpcError {
	key := string(id)
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, dup := t.reqs[key]; dup {
		return errDuplicateID
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &inflightRequest{id: id, progressToken: progressToken, out: t.out, ctx: ctx, cancel: cancel}
	t.reqs[key] = r
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		result, err := work(r)
		t.mu.Lock()
		delete(t.reqs, key)
		t.mu.Unlock()
		r.cancel()
		if werr := r.deliver(response(request{id: id}, result, err), true); werr != nil {
			logf("write answer to request %s: %v", id, werr)
		}
	}()
	return nil
}

// deliver writes one message for r, answer marking its answer, unless the
// client has cancelled it.
func (r *inflightRequest) deliver(message any, answer bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancelled {
		return nil
	}
	return r.out.writeFor(r.id, message, answer)
}

// cancel ends the request with the given raw id after a client's
// notifications/cancelled. It reports whether such a request was running;
// unknown or finished ids are ignored, as every revision allows.
func (t *inflight) cancel(id json.RawMessage) bool {
	t.mu.Lock()
	r, ok := t.reqs[string(id)]
	t.mu.Unlock()
	if ok {
		r.mu.Lock()
		r.cancelled = true
		r.mu.Unlock()
		r.cancel()
	}
	return ok
}

// close ends every running request, as when stdin reaches EOF, and waits for
// their goroutines. Their answers are still written (the client did not
// cancel them); a writer that fails then only logs.
func (t *inflight) close() {
	t.mu.Lock()
	for _, r := range t.reqs {
		r.cancel()
	}
	t.mu.Unlock()
	t.wg.Wait()
}

// notify writes a notification on behalf of r (for example a
// notifications/resources/updated of a subscriptions/listen stream), unless
// the client has cancelled r.
func (r *inflightRequest) notify(method string, params object) error {
	return r.deliver(object{{"jsonrpc", "2.0"}, {"method", method}, {"params", params}}, false)
}

// done is closed when the client cancels r or the session closes.
func (r *inflightRequest) done() <-chan struct{} { return r.ctx.Done() }

// progress writes notifications/progress for r when the request carried a
// progressToken, and nothing otherwise. total and message are left out when
// zero and empty.
func (r *inflightRequest) progress(progress, total int64, message string) error {
	if r.progressToken == nil {
		return nil
	}
	params := object{{"progressToken", rawJSON(r.progressToken)}, {"progress", progress}}
	if total > 0 {
		params = append(params, field{"total", total})
	}
	if message != "" {
		params = append(params, field{"message", message})
	}
	return r.notify("notifications/progress", params)
}
