package main

// Group commit: pipelined sends to one group share one transaction, costing
// about one send. This file only decides which; each is answered as a lone
// send_message is, byte for byte (TestGroupCommitMatchesOneByOne).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"runtime/debug"
)

// pendingSend is a send_message call read ahead of its answer.
type pendingSend struct {
	req request
	preparedCall
	groupID string
	msg     outgoing
}

// hugeLine is the line length from which a send runs alone, holding nothing
// of its line (detach), with freed pages returned to the system before the
// decode and the insert: otherwise a 200 MiB line peaked at over 6× its size.
const hugeLine = 16 << 20

// maxSendRun bounds a run so that its first send is still answered within a
// few milliseconds, and a process waiting for the group's write lock as soon.
const maxSendRun = 64

// pipelinedSends returns line, when it is a send_message call, with the sends
// to the same group fully buffered behind it in r, or nil. It never waits for
// input, so a lone request is not delayed.
func (s *server) pipelinedSends(line []byte, r *bufio.Reader) []pendingSend {
	if len(line) >= hugeLine {
		debug.FreeOSMemory() // ReadBytes's chunks, before decoding adds a copy
	}
	first, ok := s.sendCall(line)
	if !ok {
		return nil
	}
	run := []pendingSend{first}
	if len(line) >= hugeLine {
		run[0].detach()
		return run
	}
	for len(run) < maxSendRun {
		buffered, _ := r.Peek(r.Buffered())
		end := bytes.IndexByte(buffered, '\n')
		if end < 0 {
			break
		}
		// A copy: the decoded call refers to its line, and r reuses its buffer.
		next, ok := s.sendCall(bytes.Clone(buffered[:end+1]))
		if !ok || next.groupID != first.groupID {
			break
		}
		r.Discard(end + 1)
		run = append(run, next)
	}
	return run
}

// sendCall decodes line as a send_message request, on a ready session, that
// prepareCall and parseSend accept and whose group id is well formed; anything
// else is left to handleLine. The result refers to line, not to be reused.
func (s *server) sendCall(line []byte) (pendingSend, bool) {
	line = bytes.Trim(line, " \t\r\n")
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

// answerSends stores a run and writes its answers in order, all after its
// commit and its audit records: every stored send is audited, as one stored
// alone is, even when the client stops reading answers midway.
func (s *server) answerSends(run []pendingSend) error {
	results := s.storeSends(run)
	var groupName string
	var groupNameRead bool
	if len(run) > 1 { // one commit: one read of the name serves every audit record
		groupName, groupNameRead = s.auditGroupName(run[0].groupID)
	}
	answers := make([]any, len(run))
	for i, p := range run {
		p.call.result, p.call.groupName, p.call.groupNameRead = results[i], groupName, groupNameRead
		result, _ := s.finishCall(p.preparedCall)
		answers[i] = response(p.req, result, nil)
	}
	for _, answer := range answers {
		if err := s.out.write(answer); err != nil {
			return err
		}
	}
	return nil
}

// storeSends stores a run in one transaction, retried while busy, and returns
// each send's result: a run busy for the whole window is answered busy at once,
// not retried send by send (3 s each); any other failure stores each alone.
func (s *server) storeSends(run []pendingSend) []toolResult {
	send := run[0].tool
	if len(run[0].msg.text) >= hugeLine {
		debug.FreeOSMemory() // the line, now unreferenced: see hugeLine
	}
	msgs := mapSlice(run, func(p pendingSend) outgoing { return p.msg })
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

// detach makes p refer to nothing of its line, which can then be freed before
// the message is stored: the id and the other arguments (which only the audit
// record reads) are copied, and the decoded text is p.msg's alone.
func (p *pendingSend) detach() {
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
