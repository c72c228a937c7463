/* fuzz.h - what the libFuzzer targets share: the entry point they define
 * and a check that stops the run (libFuzzer saves the input) when a
 * property does not hold. */
#ifndef SB_FUZZ_H
#define SB_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                         \
	do {                                                                             \
		if (!(c))                                                                \
			abort();                                                         \
	} while (0)

#endif
