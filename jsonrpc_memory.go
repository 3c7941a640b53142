package main

import (
	"bytes"
	"encoding/json"
)

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
