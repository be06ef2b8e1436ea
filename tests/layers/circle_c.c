/* In the circle: calls circle_a. */
#include "circle.h"

int circle_c(int n)
{
    return n > 0 ? circle_a(n - 1) : 0;
}
