/* In the circle: calls circle_b. */
#include "circle.h"

int circle_a(int n)
{
    return n > 0 ? circle_b(n - 1) : 0;
}
