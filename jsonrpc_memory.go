package main

import (
	"bytes"
	"encoding/json"
	"runtime/debug"
)

// hugeLine is the line (or message) length from which the stdio transport
// and the store trade a little time for memory. A send_message line of this
// size would hold, at its worst moment, the line, the decoded text and
// SQLite's two copies of it (its bound parameter and the row's record), and
// a third for the search trigger. The line is freed before the insert, and
// insertHuge drops the decoded text once bound and avoids the trigger's
// copy. Left to itself Go's collector lets the heap grow to twice what is
// live before collecting, and keeps what it freed mapped for a while, so a
// 200 MiB line used to peak at more than 6× its size. Below it nothing here
// runs and small sends pay nothing.
const hugeLine = 16 << 20

// releaseMemory collects garbage now and returns freed pages to the
// operating system. It costs one collection (milliseconds when the heap is
// a few large byte slices); it is only called around lines of hugeLine bytes
// or more, when the garbage it returns is hundreds of megabytes.
func releaseMemory() { debug.FreeOSMemory() }

// detach makes p refer to nothing of the line it was decoded from, so that
// the line (the size of the message, and more) can be freed before the
// message is stored: the request id and every argument but the message,
// which p.msg already holds decoded, are copied; the raw params and the
// message's raw text are dropped. Only the audit record reads the
// arguments after this, and it reads none of those. The decoded text moves
// into a hugeText, so that the insert can take the last reference to it.
func (p *pendingSend) detach() {
	p.msg.huge, p.msg.text = &hugeText{s: p.msg.text}, ""
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
