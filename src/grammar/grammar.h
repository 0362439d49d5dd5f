/* Constrained decoding: a JSON Schema subset (or "any JSON object") compiled
 * to a grammar, an incremental byte-level matcher over it, and the token
 * mask that the matcher allows next, walked against a byte trie of the
 * vocabulary.  A compiled grammar is immutable and shared (reference
 * counted) by every request that uses it; a matcher is one request's parser
 * state; a vocabulary trie is built once per model.
 *
 * Supported schema keywords: type (one or a list), properties, required,
 * additionalProperties (false, true, or a schema), enum, const, items,
 * prefixItems, minItems, maxItems, nested objects, anyOf, oneOf (as anyOf:
 * the generated text must match one branch), allOf with one member, $ref to
 * #/$defs/NAME or #/definitions/NAME (recursion allowed), string minLength,
 * maxLength, pattern (a regex subset: literals, escapes, ., classes [a-z]
 * and [^...], \d \w \s, groups, |, ?, *, +, {m}, {m,n}, ^ and $ at the
 * ends), format date, time, date-time, uuid, email; integer and number.
 * Annotations (title, description, $schema, $id, default, examples,
 * $comment, deprecated, readOnly, writeOnly) are ignored.  Anything else is
 * an error naming the keyword and its JSON path.  The text is compact JSON
 * (no whitespace outside strings) unless the schema's root asks for
 * whitespace with GRAMMAR_WS_KEYWORD; object properties come out in the
 * schema's order.
 *
 * What the generated text looks like, in detail:
 * - No whitespace before or after the value, nor between tokens.  With
 *   GRAMMAR_WS_KEYWORD "pretty" at the schema's root: between tokens
 *   (after { [ , : and before } ] , :) 0 to GRAMMAR_MAX_WS of space, tab,
 *   CR, LF, where the model puts them ("compact", the default: none).  The
 *   keyword is read at the root only (elsewhere it is an unsupported
 *   keyword); being part of the schema's text it is part of the grammar
 *   cache's key.  json_object (no schema) is compact.
 * - Objects with "properties": only those properties, each at most once, in
 *   schema order; required ones always, optional ones may be left out.
 *   additionalProperties absent or true does not add others (the text is
 *   still valid under the schema); a schema there is used only when no
 *   properties are listed (a map: any keys, values of that schema).
 *   {"type":"object"} alone, or json_object: any object, values of any type.
 * - A schema without "type" takes it from its keywords (properties:
 *   object, items: array, minLength/pattern/format: string), else any value.
 * - enum / const values come out exactly as cJSON prints them compactly
 *   (strings as JSON strings, objects without blanks); with "type" beside
 *   them only the values of that type are kept.
 * - Strings: valid UTF-8, no raw control characters, every JSON escape
 *   (\uXXXX only as valid code points: surrogates in pairs).  minLength /
 *   maxLength count characters (an escape, or a surrogate pair, is one).
 *   With a pattern or format every character has one spelling: as itself,
 *   except '"' '\\' and controls, written \" \\ \n \t \r \b \f or \u00XX.
 *   An unanchored pattern matches anywhere in the string; '.' is any
 *   character but \n \r U+2028 U+2029.  pattern, format and min/maxLength
 *   cannot be combined (an error).
 * - Formats: date YYYY-MM-DD with the month's day count (29 February
 *   always allowed); time HH:MM:SS[.frac][Z|+HH:MM|-HH:MM]; date-time
 *   date "T" time, the offset required; uuid 8-4-4-4-12 hex; email
 *   local@domain with dot-separated atoms and at least one dot in the domain.
 * - Numbers per RFC 8259 (no leading zeros, -0 allowed), digits unbounded;
 *   integer has no fraction or exponent.  minimum, maximum, exclusive* and
 *   multipleOf are refused (an error naming the keyword).
 * - anyOf/oneOf/allOf/$ref with other keywords beside them (other than
 *   annotations and $defs) are refused; a recursion that can recur without
 *   text in between, or a schema that admits no value, is refused (path "").
 * - Token pieces: the unknown token's piece is U+FFFD, so it may appear in
 *   strings; control tokens never; end-of-generation tokens only at the end.
 * - Nesting: paths deeper than 2048 rule calls (about 1000 levels of JSON
 *   nesting) are not followed.
 * - Size: compiling counts its work against a budget (gbuild.c, about 30 ms
 *   of one core); a schema that needs more is refused as too large or
 *   complex to compile, with the path of the pattern, minItems/maxItems,
 *   maxLength or properties at fault where it is known.
 *
 * Thread safety: a grammar and a vocab trie may be used by any number of
 * threads at once; a matcher by one thread at a time. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

struct tokenizer;

#define GRAMMAR_MAX_WS 4 /* "pretty": whitespace bytes in a row between JSON tokens */
/* A root schema keyword: "compact" (default) or "pretty"; any other value
 * is an error.  The server sets it from response_format.x_sinkd_whitespace. */
#define GRAMMAR_WS_KEYWORD "x_sinkd_whitespace"

struct grammar;
struct grammar_matcher;
struct vocab_trie;

/* Compiles a JSON Schema.  On error returns -EINVAL (unsupported keyword,
 * bad value, unresolvable $ref) or -ENOMEM; err says what, and path (may be
 * NULL) gets the JSON path of the offending keyword, e.g.
 * "$.properties.when.format". */
int grammar_from_json_schema(const cJSON *schema, struct grammar **out, char *path, size_t path_cap,
                             char *err, size_t err_len);
/* Any JSON value whose top level is an object (response_format json_object). */
int grammar_json_object(struct grammar **out, char *err, size_t err_len);
/* A literal prefix, then a value of schema (tool-call envelopes such as
 * "<tool_call>\n" + arguments): prefix and suffix bytes are forced. */
int grammar_from_json_schema_wrapped(const char *prefix, const cJSON *schema, const char *suffix,
                                     struct grammar **out, char *path, size_t path_cap, char *err,
                                     size_t err_len);
/* The text (UTF-8, nothing escaped) that matches regex as a whole: the
 * pattern subset above, with ^ and $ allowed (and meaningless) at its ends
 * and '.' any character but \n \r U+2028 U+2029.  -EINVAL names what is
 * wrong and its byte offset ("an unterminated ( at offset 3"). */
int grammar_from_regex(const char *regex, struct grammar **out, char *err, size_t err_len);
struct grammar *grammar_ref(struct grammar *g);
void grammar_unref(struct grammar *g); /* NULL: no-op */

/* The vocabulary as bytes: each token's piece (tokenizer_token_piece:
 * SentencePiece space markers as spaces, byte-fallback tokens as their
 * byte, byte-level BPE decoded); control tokens carry no bytes and are never
 * allowed, except end-of-generation tokens, which are allowed exactly when
 * the grammar can end. */
int vocab_trie_new(const struct tokenizer *tok, struct vocab_trie **out, char *err, size_t err_len);
void vocab_trie_free(struct vocab_trie *t);
int vocab_trie_n_vocab(const struct vocab_trie *t);
/* Bytes the trie holds (its nodes, token lists and pieces). */
size_t vocab_trie_bytes(const struct vocab_trie *t);

/* A parser state at the start of the grammar. */
int grammar_matcher_new(struct grammar *g, const struct vocab_trie *t,
                        struct grammar_matcher **out);
void grammar_matcher_free(struct grammar_matcher *m);
/* Sets bit i of mask (uint32 words, (n_vocab + 31) / 32 of them; bit i is
 * mask[i / 32] >> (i % 32) & 1) for every token allowed next.  Never
 * empty while !grammar_matcher_done(m) (an end-of-generation token is
 * allowed when the grammar can end). */
int grammar_matcher_fill_mask(struct grammar_matcher *m, uint32_t *mask);
/* Sets logits of every token not allowed next to -INFINITY (what the
 * scheduler calls; may use fill_mask internally). */
int grammar_matcher_apply(struct grammar_matcher *m, float *logits);
/* Advances by one sampled token.  -EINVAL when the token is not allowed
 * (state unchanged). */
int grammar_matcher_accept_token(struct grammar_matcher *m, int32_t token);
/* Advances by bytes (tests, forced text); -EINVAL when not a valid
 * continuation (state unchanged). */
int grammar_matcher_accept_bytes(struct grammar_matcher *m, const char *bytes, size_t len);
/* The text so far is a complete value of the grammar. */
bool grammar_matcher_can_end(const struct grammar_matcher *m);
/* The text so far is complete and no byte may follow: the generation ends
 * here (finish_reason stop). */
bool grammar_matcher_done(const struct grammar_matcher *m);
/* Back to the start. */
void grammar_matcher_reset(struct grammar_matcher *m);
/* Gives dst the state of src (both of one grammar and trie, else -EINVAL):
 * lookahead without replaying text, and tests. */
int grammar_matcher_copy_state(struct grammar_matcher *dst, const struct grammar_matcher *src);

/* Compiled grammars by the SHA-256 of their schema's canonical text, so a
 * schema sent with every request is compiled once; a schema that fails to
 * compile (a bad keyword, or too large or complex to compile within the
 * compile budget) is kept too, with its message and path, so resending it
 * costs no compile either.  At most `capacity` entries, successes and
 * failures alike, least recently used dropped.  Compiling what misses the
 * cache is limited per client: a bucket of compile work in whole compile
 * budgets (about 30 ms each), GRAMMAR_CACHE_BURST at once, then
 * GRAMMAR_CACHE_PER_S per second; a compile may start while the bucket
 * is not empty and takes what it used (a schema too large to compile a
 * whole budget, a small one a hundredth), so a client gets at most about
 * two blow-ups in a row, then one a second.  Thread-safe. */
#define GRAMMAR_CACHE_BURST 1
#define GRAMMAR_CACHE_PER_S 1
struct grammar_cache;
int grammar_cache_new(size_t capacity, struct grammar_cache **out);
void grammar_cache_free(struct grammar_cache *c);
/* Another rate, in compile budgets (tests; every bucket starts full again). */
void grammar_cache_set_rate(struct grammar_cache *c, double burst, double per_s);
/* Like grammar_from_json_schema_wrapped (prefix, suffix: NULL or "" for
 * none; schema NULL: grammar_json_object), through the cache; *out is a new
 * reference.  client (client_len bytes; NULL: not limited) is who a compile
 * that misses the cache counts for; -EAGAIN when that client is over its
 * rate, with *retry_after_s (may be NULL) the seconds until it is not. */
int grammar_cache_get(struct grammar_cache *c, const void *client, size_t client_len,
                      const char *prefix, const cJSON *schema, const char *suffix,
                      struct grammar **out, int *retry_after_s, char *path, size_t path_cap,
                      char *err, size_t err_len);
/* One of several enveloped schemas (prefix and suffix NULL or ""; schema
 * not NULL), each its own root for $ref: a forced tool call in a format
 * that writes the tool's name outside the JSON, one per tool. */
struct grammar_alt {
	const char *prefix;
	const cJSON *schema;
	const char *suffix;
};
/* Like grammar_cache_get, for the text of any one of alts[0..n). */
int grammar_cache_get_alts(struct grammar_cache *c, const void *client, size_t client_len,
                           const struct grammar_alt *alts, size_t n, struct grammar **out,
                           int *retry_after_s, char *path, size_t path_cap, char *err,
                           size_t err_len);
/* grammar_from_regex through the cache (keyed apart from every schema),
 * counted against client's rate like a schema. */
int grammar_cache_get_regex(struct grammar_cache *c, const void *client, size_t client_len,
                            const char *regex, struct grammar **out, int *retry_after_s,
                            char *err, size_t err_len);
