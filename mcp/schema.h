/* schema.h - checking a tool's arguments against its JSON Schema, in C.
 *
 * The subset the tools' schemas use: type (object, string, integer,
 * number, boolean, array, or a list of them), properties, required,
 * additionalProperties (false, or a schema for the other keys), minLength
 * and maxLength (in characters, as JSON Schema counts them), minimum,
 * maximum and exclusiveMinimum, enum (of strings), items, minItems and
 * maxItems. Other keywords (description, default, title) are ignored.
 * Nothing here allocates but jansson's iterators, or prints.
 */
#ifndef SB_MCP_SCHEMA_H
#define SB_MCP_SCHEMA_H

#include <jansson.h>

/* Checks value against schema. Returns SB_OK, or SB_ERR_INVAL with a
 * one-line detail (sb_errmsg) that names the field by its path from
 * "arguments" ("model: expected a string, got an integer", "env.HOME:
 * ...", "argv[2]: ..."; the top level is named "arguments"). */
int sb_mcp_schema_check(const json_t *schema, const json_t *value);

#endif
