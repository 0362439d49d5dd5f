/* sinkd entry point (grown by the foundation work). */
#include <stdio.h>
int main(void)
{
	puts("sinkd " SINKD_VERSION);
	return 0;
}
