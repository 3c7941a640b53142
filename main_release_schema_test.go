package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// jsonSchema checks a JSON value against a draft-07 JSON Schema, for the
// keywords the MCP registry's server.schema.json uses. A keyword it does not
// know is reported as an error rather than skipped, so a newer schema that
// needs more than this cannot pass by being half read.
type jsonSchema struct {
	root map[string]any
}

// schemaAnnotations are the keywords that say nothing about validity.
var schemaAnnotations = map[string]bool{
	"$comment": true, "$id": true, "$schema": true, "title": true, "description": true,
	"example": true, "examples": true, "default": true, "discriminator": true, "definitions": true,
}

// validate returns every way doc fails the schema, each as "PATH: WHY".
func (s jsonSchema) validate(doc any) []string {
	var errs []string
	s.check(s.root, doc, "$", &errs)
	return errs
}

// check validates v at path against one schema object.
func (s jsonSchema) check(schema map[string]any, v any, path string, errs *[]string) {
	if ref, ok := schema["$ref"].(string); ok {
		// In draft-07 a $ref replaces its siblings, which are annotations here.
		target, err := s.resolve(ref)
		if err != nil {
			*errs = append(*errs, path+": "+err.Error())
			return
		}
		s.check(target, v, path, errs)
		return
	}
	for _, key := range sortedKeys(schema) {
		if !schemaAnnotations[key] {
			s.keyword(key, schema, v, path, errs)
		}
	}
}

// keyword applies one validation keyword of schema to v.
func (s jsonSchema) keyword(key string, schema map[string]any, v any, path string, errs *[]string) {
	fail := func(format string, args ...any) { *errs = append(*errs, path+": "+fmt.Sprintf(format, args...)) }
	value := schema[key]
	str, isString := v.(string)
	switch key {
	case "type":
		if !jsonTypeIs(v, value.(string)) {
			fail("got %T; want %s", v, value)
		}
	case "enum":
		if !slices.ContainsFunc(value.([]any), func(e any) bool { return reflect.DeepEqual(e, v) }) {
			fail("%v is not one of %v", v, value)
		}
	case "const":
		if !reflect.DeepEqual(value, v) {
			fail("got %v; want %v", v, value)
		}
	case "pattern":
		if isString && !regexp.MustCompile(value.(string)).MatchString(str) {
			fail("%q does not match %s", str, value)
		}
	case "minLength", "maxLength":
		n := utf8.RuneCountInString(str)
		if limit := int(value.(float64)); isString && (key == "minLength" && n < limit || key == "maxLength" && n > limit) {
			fail("length %d breaks %s %d", n, key, limit)
		}
	case "format":
		s.format(value.(string), v, fail)
	case "required":
		if obj, ok := v.(map[string]any); ok {
			for _, name := range value.([]any) {
				if _, ok := obj[name.(string)]; !ok {
					fail("missing required %q", name)
				}
			}
		}
	case "properties", "additionalProperties":
		s.properties(key, schema, v, path, errs)
	case "items":
		if list, ok := v.([]any); ok {
			for i, item := range list {
				s.check(value.(map[string]any), item, fmt.Sprintf("%s[%d]", path, i), errs)
			}
		}
	case "allOf":
		for _, sub := range value.([]any) {
			s.check(sub.(map[string]any), v, path, errs)
		}
	case "anyOf", "oneOf":
		s.alternatives(key, value.([]any), v, path, errs)
	case "not":
		if len(s.sub(value.(map[string]any), v, path)) == 0 {
			fail("matches a schema it must not (%v)", value)
		}
	default:
		fail("schema keyword %q is not supported by this validator", key)
	}
}

// properties checks an object's members against properties and
// additionalProperties (only when handling the first of the two, so each
// member is checked once).
func (s jsonSchema) properties(key string, schema map[string]any, v any, path string, errs *[]string) {
	obj, ok := v.(map[string]any)
	if !ok || key == "additionalProperties" && schema["properties"] != nil {
		return
	}
	props, _ := schema["properties"].(map[string]any)
	for _, name := range sortedKeys(obj) {
		where := path + "." + name
		if sub, ok := props[name].(map[string]any); ok {
			s.check(sub, obj[name], where, errs)
			continue
		}
		switch extra := schema["additionalProperties"].(type) {
		case bool:
			if !extra {
				*errs = append(*errs, where+": not allowed here")
			}
		case map[string]any:
			s.check(extra, obj[name], where, errs)
		}
	}
}

// alternatives checks anyOf (at least one branch) or oneOf (exactly one).
func (s jsonSchema) alternatives(key string, branches []any, v any, path string, errs *[]string) {
	matched := 0
	var first []string
	for i, b := range branches {
		sub := s.sub(b.(map[string]any), v, path)
		if len(sub) == 0 {
			matched++
		} else if i == 0 {
			first = sub
		}
	}
	switch {
	case matched == 0:
		*errs = append(*errs, fmt.Sprintf("%s: matches none of %s (first: %s)", path, key, strings.Join(first, "; ")))
	case key == "oneOf" && matched > 1:
		*errs = append(*errs, fmt.Sprintf("%s: matches %d branches of oneOf", path, matched))
	}
}

// sub returns the errors of v against schema without recording them.
func (s jsonSchema) sub(schema map[string]any, v any, path string) []string {
	var errs []string
	s.check(schema, v, path, &errs)
	return errs
}

// format checks the formats the schema names: uri must parse as an absolute
// URI; uri-template, a URI with {variables}, is only required to be a string.
func (s jsonSchema) format(name string, v any, fail func(string, ...any)) {
	str, ok := v.(string)
	switch {
	case name == "uri-template":
	case name != "uri":
		fail("format %q is not supported by this validator", name)
	case ok:
		if u, err := url.Parse(str); err != nil || !u.IsAbs() {
			fail("%q is not an absolute URI", str)
		}
	}
}

// resolve finds a "#/definitions/NAME" reference.
func (s jsonSchema) resolve(ref string) (map[string]any, error) {
	name, ok := strings.CutPrefix(ref, "#/definitions/")
	defs, _ := s.root["definitions"].(map[string]any)
	target, found := defs[name].(map[string]any)
	if !ok || !found {
		return nil, fmt.Errorf("cannot resolve $ref %q", ref)
	}
	return target, nil
}

// jsonTypeIs reports whether v, as decoded by encoding/json into any, is of
// the JSON Schema type name.
func jsonTypeIs(v any, name string) bool {
	switch name {
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "number":
		_, ok := v.(float64)
		return ok
	case "integer":
		f, ok := v.(float64)
		return ok && f == float64(int64(f))
	case "null":
		return v == nil
	}
	return false
}

// sortedKeys returns an object's keys in order, so errors come out stably.
func sortedKeys(obj map[string]any) []string {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// decodeSchemaJSON decodes text into the generic value jsonSchema checks.
func decodeSchemaJSON(text []byte) (any, error) {
	var v any
	if err := json.Unmarshal(text, &v); err != nil {
		return nil, fmt.Errorf("decode JSON: %w", err)
	}
	return v, nil
}
