package main

// This file renders the tool table (tools.go) as tools/list answers it, once
// for each protocol revision, at start.

// toolSchema is what protocol 2025-06-18 and later add to a tool: a title,
// behaviour annotations and an outputSchema. Annotations are judged from
// what each tool really does: the retrieval tools mark messages read, so
// they are not read-only; a re-run of join, leave, delete or an update has
// no further effect; nothing reaches outside the groups directory.
type toolSchema struct {
	title    string
	readOnly bool
	// destructive is judged per tool, so unlike the legacy list (delete_group
	// only) it also marks update_group_metadata and leave_group, deliberately.
	destructive bool
	idempotent  bool
	output      object // the success shape; the error shape is added by outputSchema
}

// toolList is the tools/list result for 2025-03-26 and earlier, rendered once.
var toolList = func() object {
	return object{{"tools", mapSlice(tools, func(t tool) any {
		required := field{"required", stringList(append(append([]string{}, t.required...), "caller_name"))}
		schema := object{{"type", "object"}, {"properties", withProps(t.properties, callerName)}, required, {"additionalProperties", false}}
		if len(t.required) == 0 {
			// The original appends caller_name's "required" to schemas
			// that had none, after additionalProperties.
			schema[2], schema[3] = schema[3], schema[2]
		}
		def := object{{"name", t.name}, {"description", t.description}}
		// The original's only annotation, kept for 2025-03-26 and earlier
		// (toolSchema.destructive says why the typed list differs).
		if t.name == "delete_group" {
			def = append(def, field{"annotations", object{{"destructiveHint", true}}})
		}
		return append(def, field{"inputSchema", schema})
	})}}
}()

// callerName is the audit-only argument every listed schema requires, as
// the original's do; checkArgs accepts it on every tool.
var callerName = field{"caller_name", object{{"type", "string"}, {"description", "Required human-readable caller name recorded in audit analytics."}}}

// typedToolList is tools/list for 2025-06-18 and later: the legacy list
// with title, annotations and outputSchema on every tool.
var typedToolList = func() object {
	legacy := toolList.get("tools").([]any)
	list := make([]any, len(tools))
	for i, t := range tools {
		ts := toolSchemas[t.name]
		list[i] = object{{"name", t.name}, {"title", ts.title}, {"description", t.description}, {"inputSchema", legacy[i].(object).get("inputSchema")},
			{"outputSchema", ts.outputSchema()},
			{"annotations", object{{"title", ts.title}, {"readOnlyHint", ts.readOnly}, {"destructiveHint", ts.destructive},
				{"idempotentHint", ts.idempotent}, {"openWorldHint", false}}}}
	}
	return object{{"tools", list}}
}()

var (
	nullableString = object{{"type", []any{"string", "null"}}}
	stringItems    = object{{"type", "array"}, {"items", object{{"type", "string"}}}}
	groupShape     = shape([]string{"group_id", "name", "description"},
		field{"group_id", object{{"type", "string"}}}, field{"name", nullableString}, field{"description", nullableString},
		field{"created_at", nullableString}, field{"updated_at", nullableString})
	messagesShape = shape([]string{"messages"}, field{"messages", object{{"type", "array"}, {"items", shape([]string{"id"},
		field{"id", object{{"type", "integer"}}}, field{"context_id", nullableString}, field{"name", nullableString},
		field{"message", nullableString}, field{"priority", nullableString}, field{"mentions", stringItems},
		field{"wakeup_targets", stringItems}, field{"routing_reason", nullableString}, field{"sent_at", nullableString})}}})
)

// shape is a JSON schema of an object with the given required keys.
func shape(required []string, props ...field) object {
	return object{{"type", "object"}, {"properties", object(props)}, {"required", stringList(required)}}
}

// toolSchemas holds every tool's additions, by tool name.
var toolSchemas = map[string]toolSchema{
	"create_group":          {title: "Create group", output: groupShape},
	"list_groups":           {title: "List groups", readOnly: true, idempotent: true, output: shape([]string{"groups"}, field{"groups", object{{"type", "array"}, {"items", groupShape}}})},
	"get_group_metadata":    {title: "Get group metadata", readOnly: true, idempotent: true, output: groupShape},
	"update_group_metadata": {title: "Update group metadata", destructive: true, idempotent: true, output: groupShape},
	"get_users": {title: "List group members", readOnly: true, idempotent: true, output: shape([]string{"users"}, field{"users", object{{"type", "array"}, {"items", shape([]string{"context_id"},
		field{"context_id", object{{"type", "string"}}}, field{"name", nullableString}, field{"joined_at", nullableString},
		field{"latest_message_id", object{{"type", []any{"integer", "null"}}}})}}})},
	"delete_group": {title: "Delete group", destructive: true, idempotent: true, output: shape([]string{"group_id", "deleted"},
		field{"group_id", object{{"type", "string"}}}, field{"deleted", object{{"type", "boolean"}}})},
	"join_group": {title: "Join group", idempotent: true, output: shape([]string{"group_id", "joined", "wakeup_resource_uri"},
		field{"group_id", object{{"type", "string"}}}, field{"joined", object{{"type", "boolean"}}}, field{"wakeup_resource_uri", object{{"type", "string"}}})},
	"leave_group": {title: "Leave group", destructive: true, idempotent: true, output: shape([]string{"group_id", "left"},
		field{"group_id", object{{"type", "string"}}}, field{"left", object{{"type", "boolean"}}})},
	"get_all_messages":    {title: "Get all messages", idempotent: true, output: messagesShape},
	"get_latest_messages": {title: "Get latest messages", idempotent: true, output: messagesShape},
	"get_unread_messages": {title: "Get unread messages", idempotent: true, output: messagesShape},
	"get_messages_after":  {title: "Get messages after an id", idempotent: true, output: messagesShape},
	"search_messages":     {title: "Search messages", idempotent: true, output: messagesShape},
	"wait_for_messages":   {title: "Wait for messages", idempotent: true, output: messagesShape},
	"send_message": {title: "Send message", output: shape([]string{"message_id", "group_id"},
		field{"message_id", object{{"type", "integer"}}}, field{"group_id", object{{"type", "string"}}}, field{"priority", nullableString},
		field{"mentions", stringItems}, field{"routing_reason", nullableString}, field{"wakeup_targets", stringItems})},
}

// errorShape is the structured form of every failing tool result.
var errorShape = object{{"type", "object"}, {"properties", object{{"error", object{{"type", "string"}}}}},
	{"required", stringList{"error"}}, {"additionalProperties", false}}

// outputSchema admits a tool's success shape and the error shape, since
// clients validate structuredContent whatever isError says. Its root stays
// type object, as 2025-06-18 and 2025-11-25 require.
func (ts toolSchema) outputSchema() object {
	return object{{"type", "object"}, {"anyOf", []any{ts.output, errorShape}}}
}
