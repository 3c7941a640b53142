package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// mailWait is one wait_for_messages call: a member of one group waiting for
// unread mail there, for agents whose client turns no notification into a
// model turn.
type mailWait struct {
	s         *server
	groupID   string
	contextID string
	name      string
}

const (
	// defaultWaitSeconds is wait_for_messages' timeout when none is given.
	defaultWaitSeconds = 25
	// maxWaitSeconds caps timeout_seconds below common clients' request
	// timeouts (the TypeScript SDK's is 60 s, by default not reset on
	// progress), so that the empty answer arrives before they give up.
	maxWaitSeconds = 50
	// defaultWaitKeepalive is how often a waiting call with a progress token
	// reports progress, well inside the timeout of clients that reset on it.
	defaultWaitKeepalive = 10 * time.Second
)

// waitForMessagesDescription is the tool's description for agents.
const waitForMessagesDescription = "Wait until this context_id has unread messages in the group, then return them exactly as get_unread_messages does (they are marked read); return an empty list if timeout_seconds pass first. Call it when you have nothing else to do and want to be woken by another agent's message. Other requests are answered while it waits."

// toolWaitForMessages is the wait_for_messages tool. Its first check is
// get_unread_messages' read, so a non-member or a wrong name fails at once
// with that tool's errors.
func toolWaitForMessages(s *server, a toolArgs, r *inflightRequest) (any, error) {
	contextID, name, err := a.identity()
	if err != nil {
		return nil, err
	}
	timeout, err := a.waitTimeout()
	if err != nil {
		return nil, err
	}
	w := mailWait{s: s, groupID: a.groupID(), contextID: contextID, name: name}
	msgs, err := w.wait(r, timeout)
	return messagesObject(msgs), err
}

// waitTimeout reads timeout_seconds: absent or null means the default, a
// number above maxWaitSeconds is capped rather than refused, anything else
// must be a number of at least zero.
func (a toolArgs) waitTimeout() (time.Duration, error) {
	if a.isNull("timeout_seconds") {
		return defaultWaitSeconds * time.Second, nil
	}
	// Of a valid JSON value ParseFloat reads only a number; one too large
	// for a float64 parses as ±Inf with ErrRange.
	v, err := strconv.ParseFloat(string(a.values["timeout_seconds"]), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) || v < 0 {
		return 0, validationErrorf("timeout_seconds must be a number from 0 to %d.", maxWaitSeconds)
	}
	return time.Duration(min(v, maxWaitSeconds) * float64(time.Second)), nil
}

// wait returns the member's unread mail as soon as there is any, checking
// now, whenever the change watcher names the group, and every poll interval
// as a safety net (file events can be missed, or be off). It returns nothing
// at the timeout or when r ends (a client's cancel, which writes nothing,
// or the session closing).
func (w mailWait) wait(r *inflightRequest, timeout time.Duration) ([]message, error) {
	var events <-chan struct{}
	var sub *watchSubscription
	poll := w.s.subs.interval
	if c := w.s.changes; c != nil {
		// Only this group's writes wake the wait.
		sub = c.subscribeTo([]string{w.groupID})
		defer sub.close()
		events = sub.C
		if c.native.Load() {
			poll = max(poll, watchSafetyPoll)
		}
	}
	ctx, cancel := context.WithTimeout(r.ctx, timeout)
	defer cancel()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	keep := time.NewTicker(w.s.cfg.waitKeepalive)
	defer keep.Stop()
	started := time.Now()
	msgs, err := w.read(r.ctx)
	for n := int64(1); err == nil && len(msgs) == 0; {
		select {
		case <-ctx.Done(): // the timeout, or r ended
			return nil, nil
		case <-keep.C:
			left := max(0, timeout-time.Since(started)).Round(time.Second)
			if err := r.progress(n, 0, fmt.Sprintf("Waiting for messages, %s left", left)); err != nil {
				logf("wait_for_messages progress: %v", err)
			}
			n++
			continue
		case <-tick.C:
		case <-events:
			if groups, all := sub.take(); !all && !slices.Contains(groups, w.groupID) {
				continue
			}
		}
		msgs, err = w.check(r.ctx)
	}
	if err != nil && r.ctx.Err() != nil {
		return nil, nil // the request ended and its read rolled back: nothing was taken
	}
	return msgs, err
}

// check reads the member's unread count, which costs no write, and reads
// and marks the mail only when there is some, or when the member is gone
// (the read then fails as get_unread_messages would).
func (w mailWait) check(ctx context.Context) ([]message, error) {
	var n int64
	var member bool
	err := retryBusyContext(ctx, func() (err error) {
		n, member, err = w.s.store.unreadCount(w.groupID, w.contextID)
		return err
	})
	if err != nil || (member && n == 0) {
		return nil, err
	}
	return w.read(ctx)
}

// read is get_unread_messages' read and mark, recording the messages as
// delivered by wait_for_messages. Busy retries wrap each read, not the whole
// wait, so a busy group delays one check rather than the answer; they end
// with the request (ctx), whose read then marks nothing.
func (w mailWait) read(ctx context.Context) ([]message, error) {
	if refused := w.s.cfg.speaksFor(w.contextID); refused != nil {
		return nil, refused // the tokens file narrowed the token while this call waited
	}
	var msgs []message
	err := retryBusyContext(ctx, func() (err error) {
		msgs, err = w.s.store.unreadMessages(ctx, w.groupID, w.contextID, w.name, viaWaitForMessage)
		return err
	})
	return msgs, err
}

// startWaitingCall runs a prepared call of a waiting tool on the session's
// in-flight table: its audited answer is written when it completes, possibly
// after answers to later requests. It fails with errDuplicateID when the
// request id is already in flight.
func (s *server) startWaitingCall(req request, pc preparedCall) *rpcError {
	return s.inflight.start(req.id, readRequestMeta(req.params).progressToken, func(r *inflightRequest) (any, *rpcError) {
		pc.call.result = pc.tool.result(pc.tool.wait(s, pc.call.args, r))
		result, rerr := s.finishCall(pc)
		if rerr == nil && req.version == revModern {
			return s.modernResult(result.(object), nil), nil
		}
		return result, rerr
	})
}
