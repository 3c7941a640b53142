package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestHookReadsAPageOfTheBacklog gives the member more unread mail than a
// hook prints, as joining a group with a long history does: the hook reads
// only the page it may print, wake events first, yet still counts the rest.
func TestHookReadsAPageOfTheBacklog(t *testing.T) {
	f := newHookFixture(t, "sess-1")
	if err := f.st.joinGroup(f.groupID, "carol-ctx", "carol"); err != nil {
		t.Fatal(err)
	}
	for i := range 25 {
		f.sendAs(t, fmt.Sprintf("@carol note %02d", i))
	}
	for i := range 3 {
		f.sendAs(t, fmt.Sprintf("@bob wake %d", i))
	}
	groups, err := f.st.memberships("sess-1")
	if err != nil || len(groups) != 1 {
		t.Fatalf("memberships %+v (%v); want one", groups, err)
	}
	page, total, err := f.st.pendingMail(groups[0], "sess-1", hookMaxMessages+1)
	if err != nil || total != 28 || len(page) != hookMaxMessages+1 || page[0].msg.text != "@bob wake 0" || page[3].msg.text != "@carol note 00" {
		t.Fatalf("pendingMail read %d of %d messages (%v); want the %d a hook may walk of 28, wake events first", len(page), total, err, hookMaxMessages+1)
	}
	out, _, _ := runHookCLI(t, []byte(`{"session_id": "sess-1", "hook_event_name": "UserPromptSubmit"}`), "--client", "claude-code")
	if text := additionalContext(t, out, true); !strings.Contains(text, "@carol note 16") || strings.Contains(text, "note 17") || !strings.Contains(text, "8 more: call get_unread_messages.") {
		t.Errorf("hook printed %q; want the wake events, notes 00-16 and 8 more", text)
	}
}
