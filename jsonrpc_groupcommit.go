package main

// Group commit: a client that pipelines sends to one group (writes several
// send_message requests before reading their answers) gets them committed
// in one transaction, which costs about as much as one send. This file only
// decides which sends share a transaction; each send is prepared by
// prepareCall, parsed by parseSend and stored by sendBatch, as a lone
// send_message is, and answered with the same bytes.
// TestGroupCommitMatchesOneByOne replays a session both ways to hold that.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
)

// pendingSend is a send_message call read ahead of its answer.
type pendingSend struct {
	req request
	preparedCall
	groupID string
	msg     outgoing
	// huge holds the text of a send of hugeLine bytes or more instead of
	// msg (detach), and is nil for any other send.
	huge *hugeText
}

// maxSendRun bounds how many pipelined sends share one transaction, so that
// the first of them is still answered within a few milliseconds and another
// process waiting for the group's write lock gets it as soon.
const maxSendRun = 64

// pipelinedSends returns line, when it is a send_message call, together
// with the send_message calls to the same group that the client has already
// pipelined behind it and that are fully buffered in r. It never waits for
// input, so a lone request is not delayed. It returns nil when line is
// anything else; a run stops at the first line that is not such a call.
func (s *server) pipelinedSends(line []byte, r *bufio.Reader) []pendingSend {
	if len(line) >= hugeLine {
		// ReadBytes gathered the line in chunks, then copied them into
		// line: return the chunks before decoding adds a copy of the text.
		releaseMemory()
	}
	first, ok := s.sendCall(line)
	if !ok {
		return nil
	}
	run := []pendingSend{first}
	if len(line) >= hugeLine {
		// A huge send runs alone, holding nothing of its line: see hugeLine.
		run[0].detach()
		return run
	}
	for len(run) < maxSendRun {
		buffered, _ := r.Peek(r.Buffered())
		end := bytes.IndexByte(buffered, '\n')
		if end < 0 {
			break
		}
		// A copy: the decoded call refers to its line (splitObject), and
		// r reuses its buffer.
		next, ok := s.sendCall(bytes.Clone(buffered[:end+1]))
		if !ok || next.groupID != first.groupID {
			break
		}
		r.Discard(end + 1)
		run = append(run, next)
	}
	return run
}

// sendCall decodes line as a single send_message request, on a session that
// may call tools, that prepareCall and parseSend accept and whose group id
// is well formed. The result refers to line, which must not be reused.
// Anything else is left to handleLine, which gives it its answer or error;
// the bytes test only skips decoding lines that cannot qualify.
func (s *server) sendCall(line []byte) (pendingSend, bool) {
	line = bytes.TrimSpace(line)
	rev, ready := s.lifecycle()
	if !ready || len(line) == 0 || line[0] != '{' || !bytes.Contains(line, []byte(`"send_message"`)) || bytes.Contains(line, []byte(metaProtocolVersion)) {
		return pendingSend{}, false
	}
	req, _, ok := decodeRequest(line)
	if !ok || req.id == nil || req.method != "tools/call" {
		return pendingSend{}, false
	}
	req.version = rev
	pc := s.prepareCall(req)
	if pc.tool == nil || pc.tool.name != "send_message" {
		return pendingSend{}, false
	}
	msg, err := parseSend(pc.call.args)
	groupID := pc.call.args.groupID()
	if err != nil || validateGroupID(groupID) != nil {
		return pendingSend{}, false
	}
	return pendingSend{req: req, preparedCall: pc, groupID: groupID, msg: msg}, true
}

// answerSends stores a run of pipelined sends and writes their answers in
// order, every one after the run's commit.
func (s *server) answerSends(run []pendingSend) error {
	results := s.storeSends(run)
	var groupName string
	var groupNameRead bool
	if len(run) > 1 {
		// The sends share one commit, so one read of the group's name
		// serves the audit records of all of them.
		groupName, groupNameRead = s.auditGroupName(run[0].groupID)
	}
	for i, p := range run {
		p.call.result, p.call.groupName, p.call.groupNameRead = results[i], groupName, groupNameRead
		result, _ := s.finishCall(p.preparedCall)
		if err := s.out.write(response(p.req, result, nil)); err != nil {
			return err
		}
	}
	return nil
}

// storeSends stores a run in one transaction, retried while busy, and
// returns each send's result. A run that stays busy for the whole retry
// window is answered busy at once rather than retried send by send, which
// would hold the client up to 3 s per send. When the shared transaction
// fails otherwise (a deleted group, a failing statement, a full disk),
// nothing of it is kept and each send is stored alone, so that it gets
// exactly the answer it would have got had it not been pipelined.
func (s *server) storeSends(run []pendingSend) []toolResult {
	send := run[0].tool
	if p := run[0]; p.huge != nil {
		releaseMemory() // the line, now unreferenced: see hugeLine
		var out sent
		err := retryBusy(func() (err error) { out, err = s.store.sendHuge(p.groupID, p.msg, p.huge); return err })
		return []toolResult{send.result(sentObject(out), err)}
	}
	msgs := make([]outgoing, len(run))
	for i, p := range run {
		msgs[i] = p.msg
	}
	outs, errs, err := s.store.sendMessages(context.Background(), run[0].groupID, msgs)
	results := make([]toolResult, len(run))
	for i := range run {
		switch {
		case err != nil && !isBusy(err) && len(run) > 1:
			results[i] = s.storeSends(run[i : i+1])[0]
		case err != nil:
			results[i] = send.result(nil, err)
		default:
			results[i] = send.result(sentObject(outs[i]), errs[i])
		}
	}
	return results
}

// detach makes p refer to nothing of the line it was decoded from, so that
// the line (the size of the message, and more) can be freed before the
// message is stored: the request id and every argument but the message,
// which p.msg already holds decoded, are copied; the raw params and the
// message's raw text are dropped. Only the audit record reads the
// arguments after this, and it reads none of those. The decoded text moves
// into p.huge, so that the insert can take the last reference to it (see
// hugeLine and store.sendHuge).
func (p *pendingSend) detach() {
	p.huge, p.msg.text = &hugeText{s: p.msg.text}, ""
	p.req.id = bytes.Clone(p.req.id)
	p.call.requestID = p.req.id
	p.req.params = nil
	values := make(map[string]json.RawMessage, len(p.call.args.values))
	for k, v := range p.call.args.values {
		if k != "message" {
			values[k] = bytes.Clone(v)
		}
	}
	p.call.args = toolArgs{values: values}
}
