/* The chat families sinkd knows: the one type that chat_template.c (how a
 * family renders messages) and tools.c (how a family writes a tool call)
 * both speak of, in a header of its own so that neither includes the
 * other's. */
#pragma once

enum chat_family {
	CHAT_FAMILY_NONE = 0, /* no template: plain fallback */
	CHAT_FAMILY_LLAMA2,   /* [INST] <<SYS>> ... */
	CHAT_FAMILY_LLAMA3,   /* <|start_header_id|> ... <|eot_id|> */
	CHAT_FAMILY_CHATML,   /* <|im_start|> ... <|im_end|> */
	CHAT_FAMILY_MISTRAL,  /* [INST] ... [/INST] without system support */
	CHAT_FAMILY_ZEPHYR,   /* <|user|>\n ... </s> */
	CHAT_FAMILY_GEMMA,    /* <start_of_turn> ... <end_of_turn> */
	CHAT_FAMILY_PHI3,     /* <|user|>\n ... <|end|> */
	CHAT_FAMILY_UNKNOWN,  /* a template we do not recognise: plain fallback */
};
