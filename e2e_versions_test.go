package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// modernParams adds the per-request _meta of 2026-07-28 to params.
func modernParams(params map[string]any) map[string]any {
	out := map[string]any{"_meta": map[string]any{
		metaProtocolVersion: revModern, metaClientCapabilities: map[string]any{},
		"io.modelcontextprotocol/clientInfo": map[string]any{"name": "e2e", "version": "1"}}}
	for k, v := range params {
		out[k] = v
	}
	return out
}

// modernTool calls a tool as a 2026-07-28 client and decodes its JSON text
// into v; the call must succeed and carry the revision's resultType.
func (p *mcpProcess) modernTool(name string, args map[string]any, v any) {
	p.tb.Helper()
	req := toolRequest(name, args)
	msg := p.call(req.Method, modernParams(req.Params.(map[string]any)))
	reply, err := parseToolReply(msg)
	if err != nil || reply.isError {
		p.tb.Fatalf("%s %s: got %+v, %v; want success", p.name, name, reply, err)
	}
	var envelope struct {
		ResultType string `json:"resultType"`
	}
	if json.Unmarshal(msg.Result, &envelope) != nil || envelope.ResultType != "complete" {
		p.tb.Errorf("%s %s: result %.300s; want resultType complete", p.name, name, msg.Result)
	}
	if err := json.Unmarshal([]byte(reply.text), v); err != nil {
		p.tb.Fatalf("%s %s: decode %.200s: %v", p.name, name, reply.text, err)
	}
}

// TestE2EThreeRevisionsOneDirectory runs a 2024-11-05, a 2025-11-25 and a
// 2026-07-28 client in three processes on one groups directory. They talk
// in a ring, and each is woken through its own revision's mechanism:
// resources/subscribe and untagged notifications/resources/updated for the
// two legacy clients, a subscriptions/listen stream whose id every
// notification carries in _meta for the modern one.
func TestE2EThreeRevisionsOneDirectory(t *testing.T) {
	dir := t.TempDir()
	old := startProcess(t, "old-2024-11-05", dir, pollEnv)
	old.initializeAt("2024-11-05")
	mid := startProcess(t, "mid-2025-11-25", dir, pollEnv)
	mid.initializeAt("2025-11-25")
	modern := startProcess(t, "new-2026-07-28", dir, pollEnv)
	var discovered struct {
		SupportedVersions []string `json:"supportedVersions"`
		ResultType        string   `json:"resultType"`
	}
	modern.result("server/discover", modernParams(nil), &discovered)
	if len(discovered.SupportedVersions) == 0 || discovered.SupportedVersions[0] != revModern || discovered.ResultType != "complete" {
		t.Fatalf("server/discover: got %+v; want 2026-07-28 first and resultType complete", discovered)
	}

	g := old.createGroup("old")
	oldURI := old.join(g, "old", "Old")
	old.result("resources/subscribe", map[string]any{"uri": oldURI}, nil)
	midURI := mid.join(g, "mid", "Mid")
	mid.result("resources/subscribe", map[string]any{"uri": midURI}, nil)
	var joined struct {
		URI string `json:"wakeup_resource_uri"`
	}
	modern.modernTool("join_group", map[string]any{"group_id": g, "context_id": "new", "name": "New"}, &joined)
	newURI := joined.URI

	// The listen's id is its subscription id; send sets it on reqs[0].
	reqs := []rpcRequest{{Method: "subscriptions/listen", Params: modernParams(map[string]any{
		"notifications": map[string]any{"resourceSubscriptions": []string{newURI}}})}}
	listenAnswer, err := modern.send(reqs...)
	if err != nil {
		t.Fatalf("write subscriptions/listen: %v", err)
	}
	subID := strconv.FormatInt(reqs[0].ID, 10)
	tagged := func(n notification) bool { return string(n.Meta[metaSubscriptionID]) == subID }
	waitUntil(t, "notifications/subscriptions/acknowledged for the listen", func() bool {
		modern.mu.Lock()
		defer modern.mu.Unlock()
		for _, m := range modern.notes {
			var ack notification
			if m.Method == "notifications/subscriptions/acknowledged" && json.Unmarshal(m.Params, &ack) == nil && tagged(ack) {
				return true
			}
		}
		return false
	})

	// old wakes mid, mid wakes new, new wakes old.
	send := func(p *mcpProcess, from, text string) {
		name := strings.ToUpper(from[:1]) + from[1:] // as joined
		args := map[string]any{"group_id": g, "context_id": from, "name": name, "message": text}
		if p == modern {
			var v any
			p.modernTool("send_message", args, &v)
			return
		}
		p.ok("send_message", args, nil)
	}
	mentioned := func(n notification) bool { return n.Relevance == "mentioned" }
	send(old, "old", "hello @mid")
	mid.waitNotification(midURI, mentioned)
	send(mid, "mid", "hello @new")
	modern.waitNotification(newURI, func(n notification) bool { return mentioned(n) && tagged(n) })
	send(modern, "new", "hello @old")
	old.waitNotification(oldURI, mentioned)

	var unread messagesReply
	mid.ok("get_unread_messages", map[string]any{"group_id": g, "context_id": "mid", "name": "Mid"}, &unread)
	var texts []string
	for _, m := range unread.Messages {
		texts = append(texts, m.ContextID+": "+m.Message)
	}
	if got := strings.Join(texts, " | "); !strings.Contains(got, "old: hello @mid") || !strings.Contains(got, "new: hello @old") {
		t.Errorf("mid's unread messages: got %s; want old's and new's messages", got)
	}

	// Each process got its wakeups in its own revision's shape only.
	for _, p := range []*mcpProcess{old, mid, modern} {
		p.mu.Lock()
		for _, m := range p.notes {
			var n notification
			json.Unmarshal(m.Params, &n)
			if isTagged := n.Meta[metaSubscriptionID] != nil; isTagged != (p == modern) {
				t.Errorf("%s: got notification %s %s; want a subscription id exactly on the 2026-07-28 client's", p.name, m.Method, m.Params)
			}
		}
		p.mu.Unlock()
	}

	// Closing stdin ends the listen stream with its completion result.
	if code, err := modern.close(); code != 0 || err != nil {
		t.Fatalf("close %s: exit %d, %v; want 0", modern.name, code, err)
	}
	select {
	case msg := <-listenAnswer[0]:
		var done struct {
			ResultType string                     `json:"resultType"`
			Meta       map[string]json.RawMessage `json:"_meta"`
		}
		if msg.Error != nil || json.Unmarshal(msg.Result, &done) != nil || done.ResultType != "complete" || string(done.Meta[metaSubscriptionID]) != subID {
			t.Errorf("listen answer at shutdown: got %s %+v; want resultType complete with subscription id %s", msg.Result, msg.Error, subID)
		}
	default:
		t.Errorf("listen: no answer when the session closed; want its completion result")
	}
}
