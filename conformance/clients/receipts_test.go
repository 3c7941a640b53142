package clients

import (
	"strings"
	"testing"
	"time"
)

// TestModelReadsReceipts is scenario h: the model sends as bob, alice
// reads the message, and the model reads bob's receipts resource through
// Claude Code's own resource tool; the result it gets must say that alice
// read it.
func TestModelReadsReceipts(t *testing.T) {
	t.Parallel()
	var s *session
	s = newSession(t, func(n int, r modelRequest) modelReply {
		as := func(extra ...string) map[string]any {
			args := map[string]any{"group_id": s.group.id, "context_id": s.group.bob, "name": "bob", "caller_name": "bob"}
			for i := 0; i+1 < len(extra); i += 2 {
				args[extra[i]] = extra[i+1]
			}
			return args
		}
		switch n {
		case 0:
			return modelReply{toolName: "mcp__crosstalk__join_group", toolInput: as()}
		case 1:
			return modelReply{toolName: "mcp__crosstalk__send_message", toolInput: as("message", "@alice "+s.marker)}
		case 2:
			s.group.alice.tool("get_unread_messages", map[string]any{"group_id": s.group.id, "context_id": "alice", "name": "alice"}, nil)
			return modelReply{toolName: "ReadMcpResourceTool", toolInput: map[string]any{"server": "crosstalk",
				"uri": "crosstalk://groups/" + s.group.id + "/receipts/" + s.group.bob}}
		}
		return modelReply{text: "Done."}
	})
	c := startStream(t, s)
	c.say("Send alice a message, then check that she read it.")
	deadline := time.Now().Add(startLimit + wakeLimit)
	var got string
	for time.Now().Before(deadline) {
		if got = s.resultOf("ReadMcpResourceTool"); got != "" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	plain := strings.ReplaceAll(got, `\`, "") // the snapshot is JSON text inside JSON text
	if !strings.Contains(plain, `"context_id": "alice", "name": "alice", "state": "read"`) {
		t.Errorf("ReadMcpResourceTool's result: got %.600s; want alice's receipt in state read", got)
	}
	// The result arrives mid-turn: the turn ends before the input closes,
	// as in scenario b (scenario j closes it during a turn).
	if !c.waitTurns(1, wakeLimit) {
		t.Errorf("the turn did not finish within %v of the resource's result", wakeLimit)
	}
	c.end(s, "h model reads its receipts")
}

// TestCodexModelReadsReceipts is scenario h for Codex: the same, through
// Codex's read_mcp_resource tool.
func TestCodexModelReadsReceipts(t *testing.T) {
	t.Parallel()
	var s *session
	bob := ""
	s = newCodexSession(t, func(n int, r modelRequest) modelReply {
		if n == 0 {
			bob = codexContextID(t, r)
		}
		as := map[string]any{"group_id": s.group.id, "context_id": bob, "name": "bob", "caller_name": "bob"}
		switch n {
		case 0:
			return modelReply{toolName: toolNamed(r, "join_group"), toolInput: as}
		case 1:
			as["message"] = "@alice " + s.marker
			return modelReply{toolName: toolNamed(r, "send_message"), toolInput: as}
		case 2:
			s.group.alice.tool("get_unread_messages", map[string]any{"group_id": s.group.id, "context_id": "alice", "name": "alice"}, nil)
			return modelReply{toolName: toolNamed(r, "read_mcp_resource"), toolInput: map[string]any{"server": "crosstalk",
				"uri": "crosstalk://groups/" + s.group.id + "/receipts/" + bob}}
		}
		return modelReply{text: "Done."}
	})
	s.group = newGroup(t, crosstalkBin, s.env, "")
	done := startCodexExec(t, s, "Send alice a message, then check that she read it.")
	want := `"context_id": "alice", "name": "alice", "state": "read"`
	_, ok := s.model.waitFor(startLimit+wakeLimit, func(r modelRequest) bool {
		return strings.Contains(strings.ReplaceAll(string(r.body), `\`, ""), want)
	})
	if !ok {
		t.Errorf("no model request carried alice's receipt in state read")
	}
	awaitCodexExit(t, done)
}
