// Files assembled into the library (the web UI, the font): the assembler's
// .incbin puts a file's bytes into a read-only section at build time, with no
// conversion to a C array (fast to compile, no size limit). GCC and clang both
// take it; the section directives differ by object format:
//   ELF (Linux, the BSDs):  .pushsection .rodata / .popsection  (built and tested)
//   Mach-O (macOS):         .const_data / .text                 (untested)
//   COFF (MinGW, clang-cl): .section .rdata / .text             (untested)
// MSVC has no inline assembler: there, build with -DNANSENSE_EMBED_WEB=OFF
// (the font has no fallback, so the library does not build with MSVC).
#pragma once

#if defined(_MSC_VER) && !defined(__clang__)
#error "nansense assembles its web UI and font with GNU-style inline assembly: use GCC or clang"
#elif defined(__APPLE__)
#define NANSENSE_ASM_RODATA_BEGIN ".const_data\n"
#define NANSENSE_ASM_RODATA_END ".text\n"
#elif defined(_WIN32)
#define NANSENSE_ASM_RODATA_BEGIN ".section .rdata,\"dr\"\n"
#define NANSENSE_ASM_RODATA_END ".text\n"
#else
#define NANSENSE_ASM_RODATA_BEGIN ".pushsection .rodata\n"
#define NANSENSE_ASM_RODATA_END ".popsection\n"
#endif
