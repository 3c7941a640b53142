package main

import (
	"context"
	"database/sql"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// chatsView is the Chats workspace: the group picker (values are group ids)
// and the selected chat.
type chatsView struct {
	Groups []selectOption
	Chat   chatView
}

// chatView is one group's conversation, members and wake events.
type chatView struct {
	Selected, Unavailable bool
	ID, Name, Description string
	Members               []memberInfo
	Wakeups               []wakeupRow
	WakeupTotal           int64
	Pending               int64 // unacknowledged wake events, all of them listed first
	Messages              messagePage
}

// wakeupRow is one wake event as the chat's side panel shows it.
type wakeupRow struct {
	MessageID           int64
	ContextID           string
	Target              string // the member's name, or the context id of one who left
	Sender, Excerpt     string // of the message that woke the target
	Priority, Relevance string
	Steps               []wakeupStep
	Pending             bool // unacknowledged: no path has delivered it yet
}

// wakeupStep is one delivery state of a wake event: created, notified,
// delivered or read, with its time when reached.
type wakeupStep struct {
	Name string
	Done bool
	At   stamp
}

// messageRow is one chat message.
type messageRow struct {
	ID                int64
	Sender, Content   string
	Created           stamp
	Priority, Routing string
	Token             string // the per-agent token's name (message_tokens), or ""
	Receipts          string // how far it got with each recipient (describeReceipts)
}

// messagePage is one page of a chat, oldest first, with the cursor for the
// page before it (zero when there is none).
type messagePage struct {
	GroupID     string
	Messages    []messageRow
	OlderCursor int64
	Error       string
}

// messagePageSize is how many messages one chat page holds.
const messagePageSize = 100

// chatMessageChars bounds the text of a message in the chat: a page of
// pasted logs of hundreds of MiB would stall the dashboard and the browser,
// and the agents' tools return the message whole.
const chatMessageChars = 64 << 10

// chatsView lists every group for the picker, by name, and reads the
// selected chat, or the first one when selected is not a listed group.
func (o *observer) chatsView(ctx context.Context, selected string) chatsView {
	ids, _ := discoverGroups(o.dir)
	names := catalogNames(ctx, o.dir, o.dbs)
	var v chatsView
	for _, id := range ids {
		if names[id] == "" {
			names[id] = o.groupName(ctx, id) // not in the catalog
		}
		v.Groups = append(v.Groups, selectOption{Value: id, Label: names[id]})
	}
	if len(v.Groups) == 0 {
		return v
	}
	sort.SliceStable(v.Groups, func(i, j int) bool { return strings.ToLower(v.Groups[i].Label) < strings.ToLower(v.Groups[j].Label) })
	if !slices.Contains(ids, selected) {
		selected = v.Groups[0].Value
	}
	v.Groups = withSelection(v.Groups, selected, "")
	v.Chat = o.chatView(ctx, selected)
	return v
}

// groupName reads a group's name from its own metadata.
func (o *observer) groupName(ctx context.Context, id string) string {
	var name sql.NullString
	if db, err := o.dbs.group(o.dir, id); err == nil {
		db.QueryRowContext(ctx, "SELECT "+shownName("name")+" FROM group_metadata WHERE id = 1").Scan(&name)
	}
	return firstNonEmpty(name.String, "Untitled group")
}

// wakeupListLimit bounds the side panel; the total is still shown.
const wakeupListLimit = 200

// chatView reads one group's conversation, members and newest wake events;
// any failure shows the chat as unavailable.
func (o *observer) chatView(ctx context.Context, id string) chatView {
	v := chatView{ID: id}
	if validateGroupID(id) != nil {
		return v
	}
	v.Selected = true
	g, err := o.readGroupSummary(ctx, id)
	if err == nil {
		v.Wakeups, err = o.readWakeups(ctx, id, memberNames(g.Members))
	}
	if err != nil {
		v.Unavailable = true
		return v
	}
	v.Name, v.Description, v.Members, v.WakeupTotal, v.Pending = g.Name, g.Description, g.Members, g.WakeupTotal, g.Pending
	v.Messages = o.messagePageView(ctx, id, 0)
	v.Unavailable = v.Messages.Error != "" // set only on an empty page
	return v
}

// readWakeups reads up to wakeupListLimit wake events, waiting ones first,
// then newest, naming each target by its member name (names) and quoting
// the message that woke it, with wakeupDeliveries' states.
func (o *observer) readWakeups(ctx context.Context, id string, names map[string]string) ([]wakeupRow, error) {
	db, err := o.dbs.group(o.dir, id)
	if err != nil {
		return nil, err
	}
	events, err := wakeupDeliveries(db, "", wakeupListLimit, true)
	if err != nil {
		return nil, err
	}
	excerpts, err := messageExcerpts(ctx, db, events)
	if err != nil {
		return nil, err
	}
	return mapSlice(events, func(d delivery) wakeupRow {
		w := wakeupRow{MessageID: d.messageID, ContextID: firstNonEmpty(truncateUTF8(d.contextID, auditValueMaxBytes), "—"), Relevance: d.relevance,
			Priority: firstNonEmpty(d.priority, "normal"), Pending: d.acknowledgedAt == nil}
		w.Target = firstNonEmpty(names[d.contextID], w.ContextID)
		w.Sender, w.Excerpt = excerpts[d.messageID][0], excerpts[d.messageID][1]
		delivered := "delivered"
		if d.deliveredVia != "" {
			delivered += " · " + strings.ReplaceAll(d.deliveredVia, "_", " ")
		}
		w.Steps = []wakeupStep{
			{Name: "created", Done: true, At: o.stampOf(d.createdAt, "—")},
			o.wakeupStep("notified", d.notifiedAt),
			o.wakeupStep(delivered, d.deliveredAt),
			o.wakeupStep("read", d.readAt),
		}
		return w
	}), nil
}

// wakeupStep is one delivery state, reached when at is set.
func (o *observer) wakeupStep(name string, at *string) wakeupStep {
	if at == nil {
		return wakeupStep{Name: name, At: stamp{Text: "not yet"}}
	}
	return wakeupStep{Name: name, Done: true, At: o.stampOf(*at, "—")}
}

// messageExcerpts reads the sender and start of each wake event's message.
func messageExcerpts(ctx context.Context, q queryer, events []delivery) (map[int64][2]string, error) {
	out := make(map[int64][2]string, len(events))
	in, args := sqlIn("id", mapSlice(events, func(d delivery) int64 { return d.messageID }))
	err := eachRow(ctx, q, func(row rowScanner) error {
		var id int64
		var sender, excerpt sql.NullString
		err := row.Scan(&id, &sender, &excerpt)
		out[id] = [2]string{sender.String, excerpt.String}
		return err
	}, "SELECT id, "+shownName("sender_name")+", "+shownText("content", 120)+" FROM messages WHERE "+in, args...)
	return out, err
}

// readMessages reads group id's messages that where (a WHERE clause with
// args) selects, as the chat shows them, with their receipts.
func (o *observer) readMessages(ctx context.Context, id, where string, args ...any) ([]messageRow, error) {
	db, err := o.dbs.group(o.dir, id)
	if err != nil {
		return nil, err
	}
	token := "NULL" // a group no tokened send reached has no message_tokens
	if tables, err := tableNames(ctx, db); err != nil {
		return nil, err
	} else if tables["message_tokens"] {
		token = "(SELECT token_name FROM message_tokens WHERE message_id = messages.id)"
	}
	out, err := queryAll(ctx, db, func(row rowScanner) (messageRow, error) {
		var m messageRow
		var sender, senderName, content, created, prio, routing, token sql.NullString
		err := row.Scan(&m.ID, &sender, &senderName, &content, &created, &prio, &routing, &token)
		m.Sender, m.Content, m.Token = firstNonEmpty(senderName.String, sender.String, "Unknown"), content.String, token.String
		if utf8.RuneCountInString(m.Content) > chatMessageChars { // read as bytes reaching a character past: substr's characters end at a NUL
			m.Content = string([]rune(m.Content)[:chatMessageChars]) + " … (cut here: get_all_messages returns the whole message)"
		}
		m.Created = o.stampOf(created.String, "")
		m.Priority, m.Routing = firstNonEmpty(prio.String, "normal"), firstNonEmpty(routing.String, "normal")
		return m, err
	}, "SELECT id, sender_context_id, "+shownName("sender_name")+", substr(CAST(content AS BLOB), 1, ?), created_at, priority, routing_reason, "+token+
		" FROM messages "+where, append([]any{4 * (chatMessageChars + 1)}, args...)...)
	if err != nil || len(out) == 0 {
		return out, err
	}
	ids := mapSlice(out, func(m messageRow) int64 { return m.ID })
	// Receipts that cannot be read leave the messages shown without them.
	if receipts, err := messageReceipts(ctx, db, ids); err == nil {
		for i := range out {
			out[i].Receipts = describeReceipts(receipts[out[i].ID])
		}
	}
	return out, nil
}

// messagePageView reads the page of messages older than cursor (or the
// newest, for zero), and one more row so "Load older" never finds nothing.
func (o *observer) messagePageView(ctx context.Context, id string, cursor int64) messagePage {
	p := messagePage{GroupID: id}
	if validateGroupID(id) != nil {
		p.Error = "Choose a valid group."
		return p
	}
	if cursor <= 0 {
		cursor = math.MaxInt64
	}
	page, err := o.readMessages(ctx, id, "WHERE id < ? ORDER BY id DESC LIMIT ?", cursor, messagePageSize+1)
	if err != nil {
		p.Error = "Messages are temporarily unavailable; retry shortly."
		return p
	}
	if len(page) > messagePageSize {
		page = page[:messagePageSize]
		p.OlderCursor = page[len(page)-1].ID
	}
	slices.Reverse(page)
	p.Messages = page
	return p
}

// serveMessages serves the page before older_than_message_id, else the newest.
func (o *observer) serveMessages(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var cursor int64
	if raw, ok := q["older_than_message_id"]; ok {
		v, err := strconv.ParseInt(strings.TrimSpace(raw[0]), 10, 64)
		if err != nil || v < 1 {
			o.renderNotice(w, r, http.StatusBadRequest, true, "Invalid message cursor.")
			return
		}
		cursor = v
	}
	o.renderPage(w, r, http.StatusOK, "messages", o.messagePageView(r.Context(), q.Get("group_id"), cursor))
}

// serveMessage serves one message of group_id as a page of its own, for
// live appends to an open chat; the page's Error says why it is missing.
func (o *observer) serveMessage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	id, err := strconv.ParseInt(strings.TrimSpace(q.Get("message_id")), 10, 64)
	if err != nil || id < 1 {
		o.renderNotice(w, r, http.StatusBadRequest, true, "Message is unavailable.")
		return
	}
	p := messagePage{GroupID: q.Get("group_id"), Error: "Message is unavailable."}
	if validateGroupID(p.GroupID) == nil {
		switch p.Messages, err = o.readMessages(r.Context(), p.GroupID, "WHERE id = ?", id); {
		case err != nil:
			p.Error = "Message is temporarily unavailable."
		case len(p.Messages) == 0:
			p.Error = "Message is no longer available."
		default:
			p.Error = ""
		}
	}
	o.renderPage(w, r, http.StatusOK, "single-message", p)
}
