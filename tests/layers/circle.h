/* Four files for the call circle checker's own test (CMakeLists.txt). */
#ifndef LAYERS_CIRCLE_H
#define LAYERS_CIRCLE_H

int circle_a(int n);
int circle_b(int n);
int circle_c(int n);
int circle_d(int n);

#endif
